"""The harness around a run: what train_gpt.py needs beside its recipe (settings parsing, the log and its reports,
the non-finite guard and stop signals, checkpoints, profiling), and the ground floor every program stands on.

The floors, each importing only from those below it (tests/test_floors.py checks it):
    harness/cli.py    the ground floor: UserError (a problem the user can fix), the one-line `error:` convention
                      and the one entry point of every program; imports nothing of the project
    harness/files.py  atomic writes and the output checks, refusing with UserError; imports only cli.py
    harness/, kernels/  the rest of the harness and the kernels: never data/, tools/ or train_gpt
    data/             the shard format (shards.py: harness/ only) and the programs that write shards
    train_gpt.py      the recipe: harness/, kernels/ and the shard format
    tools/, records/  the programs on top: anything below them

The harness never imports train_gpt: its modules take what they need as arguments. settings.py, launch.py and
compile_helpers.py import torch only inside the functions that use it, so that --help, --check and setting errors
answer, and a cold start's compile helpers start, before train_gpt.py imports torch.
"""

"""What an 8-GPU run does that one process only emulates: the collectives of an optimizer step (the communication
ledger, against the reference's bytes), the sparse bigram exchange, and the data each rank trains on.

    python3 -m pytest -q tests/test_distributed.py

Collectives are recorded by stand-ins for torch.distributed in one process (rank 0 of 8); the gloo runs of
tests/test_train.py check the real exchange end to end.
"""

import numpy as np
import pytest
import torch

import train_gpt as tg
from data.shards import write_shard
from harness.guard import NonFiniteGuard
from tests.utils import (TINY, TINY_FLAGS, batch_for, cpu_runtime, cpu_trainer, doc_stream, random_gradients, settings,
                         shard_index, tiny_model)

BF16, FP32 = 2, 4  # bytes per element


class RecordingCollectives:
    """Stand-ins for the torch.distributed calls the optimizer makes, as rank 0 of `world` ranks: each records
    (param-free) op, dtype and elements, and fills its output as if every rank had sent the same tensor."""

    def __init__(self, monkeypatch, world: int):
        self.calls, self.world = [], world
        monkeypatch.setattr(tg.dist, "is_initialized", lambda: True)
        for name in ("all_reduce", "all_to_all_single"):
            monkeypatch.setattr(tg.dist, name, getattr(self, name))
        monkeypatch.setattr(tg, "reduce_scatter", self.reduce_scatter_tensor)
        monkeypatch.setattr(tg, "all_gather", self.all_gather_into_tensor)

    class Done:
        def wait(self):
            return True

    def all_reduce(self, t, op=None, async_op=False):
        self.calls.append(("all_reduce", t.dtype, t.numel()))
        return self.Done()

    def reduce_scatter_tensor(self, out, full, op=None, async_op=False):
        self.calls.append(("reduce_scatter", full.dtype, full.numel()))
        out.copy_(full[:out.size(0)])
        return self.Done()

    def all_gather_into_tensor(self, full, shard, async_op=False):
        self.calls.append(("all_gather", full.dtype, full.numel()))
        return self.Done()

    def all_to_all_single(self, out, inp, output_split_sizes=None, input_split_sizes=None, async_op=False):
        self.calls.append(("all_to_all", inp.dtype, inp.numel()))
        assert sum(input_split_sizes) == inp.size(0) and sum(output_split_sizes) == out.size(0)
        out.zero_()
        return self.Done()


def touched_rows(rng, table_rows: int, world: int, tokens: int) -> list[np.ndarray]:
    return [rng.integers(0, table_rows, tokens) for _ in range(world)]


@pytest.mark.parametrize("do_adam, tied", [(False, True), (True, True), (True, False)])
def test_ledger_lists_exactly_the_collectives_a_step_launches(monkeypatch, do_adam, tied):
    """Rank 0 of 8, one micro-batch per step: the ledger (launch order, op, dtype, elements) is what step() calls."""
    model = tiny_model()
    rec = RecordingCollectives(monkeypatch, 8)
    opt = tg.NorMuonAdam(model, tg.Hyperparameters(**TINY), cpu_runtime(world_size=8), compile=False)
    opt.tied = tied
    random_gradients(model)
    rows = touched_rows(np.random.default_rng(0), model.bigram_embed.size(0), 8, 200)
    opt.note_touched_rows(rows)
    per = model.bigram_embed.size(0) // 8
    mine = np.unique(rows[0])
    sent = int((mine >= per).sum())  # rank 0 owns rows [0, per): it sends the others
    opt.step(1.0, 0.9, do_adam)
    expected = [(c.op, c.dtype, c.numel) for c in opt.ledger(do_adam, tied, sparse_rows_sent=sent)]
    assert rec.calls == expected
    assert ("all_to_all", torch.bfloat16, sent * model.bigram_embed.size(1)) in rec.calls or not do_adam
    wire = {c[0] for c in rec.calls if c[1] != torch.bfloat16}
    assert wire <= {"all_reduce"}, "only the small fp32 scalars may travel in fp32"


def reference_collectives(do_adam: bool, tied: bool, bigram_rows_sent: int) -> dict[str, int]:
    """Bytes each collective of the reference's optimizer step (modded-nanogpt PR #233 at world 8, no accumulation)
    carries, per parameter, derived from the parameter shapes:
    - NorMuon banks, every step: reduce-scatter and all-gather of the bf16 bank, attention (10, 4*768, 768) and
      MLP (12, 2, 3072, 768);
    - Adam parameters, odd steps only: the LM head (768, 50304) and the value embeddings (5*50304, 768) reduce-scatter
      and all-gather in bf16; the embedding (50304, 768) too once untied (while tied it rides on the head's);
    - the bigram table (5*50304, 768): an all-to-all of row counts (8 int64, on the CPU), one of the touched rows'
      int32 indices and one of their bf16 rows, then an all-gather of the bf16 table;
    - the small replicated parameters are all-reduced: a few KB, not compared here.
    Values are the tensors' sizes (a gather's output, a reduction's input, the rows sent)."""
    D, V, F = 768, 50304, 3072
    out = {"attn_bank reduce_scatter": 10 * 4 * D * D * BF16, "mlp_bank reduce_scatter": 12 * 2 * F * D * BF16,
           "attn_bank all_gather": 10 * 4 * D * D * BF16, "mlp_bank all_gather": 12 * 2 * F * D * BF16}
    if do_adam:
        tables = {"lm_head": D * V, "value_embeds": 5 * V * D} | ({} if tied else {"embed": V * D})
        for name, numel in tables.items():
            out[f"{name} reduce_scatter"] = out[f"{name} all_gather"] = numel * BF16
        out["bigram_embed all_to_all"] = 8 * 8 + bigram_rows_sent * (4 + D * BF16)  # counts, indices, rows
        out["bigram_embed all_gather"] = 5 * V * D * BF16
    return out


@pytest.mark.parametrize("do_adam, tied", [(False, True), (True, True), (True, False)])
def test_world8_bytes_never_exceed_the_reference(do_adam, tied):
    """The full-size model's ledger at world 8 (built on the meta device: shapes only) against the reference's
    collectives: per collective, and in total, no more bytes."""
    hp = tg.Hyperparameters()
    with torch.device("meta"):
        cfg = tg.GPTConfig(vocab_size=tg.round_up(hp.vocab_size, 128), model_dim=768, num_heads=6, head_dim=128,
                           max_tokens=128)
        model = tg.GPT(cfg)
        opt = tg.NorMuonAdam(model, hp, tg.Runtime(0, 8, torch.device("meta"), 1, None), compile=False)
    rows_sent = 60_000  # about what a rank sends per Adam step in stage 3 (uniform hashing: an upper estimate)
    ours = {}
    for c in opt.ledger(do_adam, tied, sparse_rows_sent=rows_sent):
        ours[f"{c.param} {c.op}"] = c.numel * c.dtype.itemsize
    reference = reference_collectives(do_adam, tied, rows_sent)
    small = {k: v for k, v in ours.items() if k not in reference}
    assert all(k.endswith("all_reduce") for k in small) and sum(small.values()) < 64 * 1024, small
    for key, nbytes in reference.items():
        assert ours[key] <= nbytes, (key, ours[key], nbytes)
    assert sum(ours.values()) <= sum(reference.values())
    # the big tables travel in bf16 (not their fp32 local sums), the bigram table sparsely; only on Adam steps
    assert ours.get("value_embeds reduce_scatter", 0) == (5 * 50304 * 768 * BF16 if do_adam else 0)
    assert ours.get("bigram_embed all_to_all", 0) == (rows_sent * 768 * BF16 if do_adam else 0)


def test_sparse_exchange_sends_each_touched_row_to_its_owner_and_averages(monkeypatch):
    """Two of eight ranks simulated by hand: what rank 1 sends to rank 0 (its touched rows in rank 0's slice, in
    row order) is what rank 0 expects, and rank 0's merged slice is the average of both ranks' gradients there."""
    model = tiny_model()
    table, D = model.bigram_embed.size(0), model.bigram_embed.size(1)
    per = table // 8
    rng = np.random.default_rng(1)
    rows = touched_rows(rng, table, 8, 60)
    grads = [torch.zeros(table, D) for _ in range(8)]
    for r in range(8):  # each rank's local fp32 gradient: nonzero only on the rows it touched
        grads[r][torch.from_numpy(np.unique(rows[r]))] = torch.randn(np.unique(rows[r]).size, D)
    sent_by_rank1 = None
    for rank in (1, 0):
        rec = RecordingCollectives(monkeypatch, 8)
        opt = tg.NorMuonAdam(model, tg.Hyperparameters(**TINY), cpu_runtime(world_size=8, rank=rank), compile=False)
        opt.note_touched_rows(rows)
        if rank == 1:
            def capture(out, inp, output_split_sizes=None, input_split_sizes=None, async_op=False):
                nonlocal sent_by_rank1
                sent_by_rank1 = inp[:input_split_sizes[0]].clone()  # rank 1's rows for rank 0
                return rec.Done()
            monkeypatch.setattr(tg.dist, "all_to_all_single", capture)
        else:  # rank 0 receives rank 1's rows and zeros from the other ranks
            def deliver(out, inp, output_split_sizes=None, input_split_sizes=None, async_op=False):
                out.zero_()
                out[:output_split_sizes[1]] = sent_by_rank1
                assert output_split_sizes[1] == sent_by_rank1.size(0)
                return rec.Done()
            monkeypatch.setattr(tg.dist, "all_to_all_single", deliver)
        merged = opt._launch_sparse("bigram_embed", grads[rank].clone())()
    expected = (grads[0][:per] + grads[1][:per].bfloat16().float()) / 8
    torch.testing.assert_close(merged, expected, atol=1e-6, rtol=0)
    received = np.unique(np.concatenate([r[r < per] for r in rows[1:]]))  # other ranks' rows in rank 0's slice
    flagged = model.written_rows()["bigram_embed"][:per].nonzero()[:, 0]
    assert torch.equal(flagged, torch.from_numpy(received)), "the rows added to the slice are flagged: zeroed after"


@pytest.mark.parametrize("world", [1, 2, 8])
def test_token_tables_travel_rounded_and_are_zeroed_in_the_rows_written(monkeypatch, world):
    """The token tables' gradients, written in some rows (flagged as lookup_op's backward flags them), reach the
    reduce-scatter as the whole table rounded to bf16; after the Adam step every gradient, flag and wire buffer is
    zero again. A NorMuon-only step leaves the tables' gradients to accumulate."""
    model = tiny_model()
    rec = RecordingCollectives(monkeypatch, world)
    sent = {}

    def reduce_scatter(out, full, op=None, async_op=False):
        sent[full.data_ptr()] = full.clone()
        return rec.reduce_scatter_tensor(out, full, op, async_op)
    monkeypatch.setattr(tg, "reduce_scatter", reduce_scatter)
    opt = tg.NorMuonAdam(model, tg.Hyperparameters(**TINY), cpu_runtime(world_size=world), compile=False)
    opt.untie()
    grads, flags = model.gradients(), model.written_rows()
    rng = torch.Generator().manual_seed(world)
    for name in model.LOOKUP_TABLES:
        rows = torch.randint(0, grads[name].size(0), (grads[name].size(0) // 3,), generator=rng)
        grads[name][rows] = torch.randn(rows.numel(), grads[name].size(1), generator=rng)
        flags[name][rows] = 1
    dense = {name: grads[name].clone() for name in model.LOOKUP_TABLES}
    opt.step(1.0, 0.9, do_adam=False)
    assert all(torch.equal(grads[n], dense[n]) for n in dense) and all(f.any() for f in flags.values())
    opt.step(1.0, 0.9, do_adam=True)
    for name in model.LOOKUP_TABLES:
        if name in opt.wires:  # (at world 8 the bigram table's rows travel sparsely)
            assert torch.equal(sent[opt.wires[name].data_ptr()], dense[name].bfloat16()), f"{name}: rounded once"
        assert not grads[name].any() and not flags[name].any(), f"{name}: zeroed after the Adam step"
    assert not any(wire.any() for wire in opt.wires.values()) and len(opt.wires) == {1: 0, 2: 3, 8: 2}[world]


# --- the data each step trains on ----------------------------------------------------------------

def reference_steps(shards: list[np.ndarray], bos: int, steps: list[tuple[int, int]]) -> list[list[np.ndarray]]:
    """The reference's loader on 8 GPUs, restated: per step, rank r takes documents from the shard's next BOS on,
    each cut at the stage's max length and the last one at T + 1 tokens in all; when the shard has no BOS left for
    some rank, the whole step is taken again from the start of the next shard."""
    shard, doc, out = 0, 0, []
    for T, max_len in steps:
        while True:
            tokens = shards[shard]
            starts = np.flatnonzero(tokens == bos)
            ranks, i = [], doc
            try:
                for _ in range(8):
                    pieces, have = [], 0
                    while have <= T:
                        if i >= len(starts):
                            raise StopIteration
                        begin = starts[i]
                        end = min(starts[i + 1] if i + 1 < len(starts) else len(tokens), begin + max_len,
                                  begin + T + 1 - have)
                        pieces.append(tokens[begin:end])
                        have += end - begin
                        i += 1
                    ranks.append(np.concatenate(pieces))
            except StopIteration:
                shard, doc = shard + 1, 0
                continue
            doc = i
            out.append(ranks)
            break
    return out


@pytest.mark.parametrize("world", [1, 2, 8])
def test_every_world_size_trains_on_the_reference_8_gpu_batches(tmp_path, world):
    """Over several shard boundaries (shards of ~2 steps each) and a stage change, step n of any world size trains
    on the 8 micro-batches the reference feeds its 8 ranks at step n, slot s on rank s % world."""
    rng = np.random.default_rng(2)
    shards = [doc_stream(rng, 90, max_len=40) for _ in range(8)]
    for i, tokens in enumerate(shards):
        write_shard(tmp_path / f"d_train_{i:06d}.bin", tokens)
    hp = tg.Hyperparameters(**TINY, bos_id=255, train_files=str(tmp_path / "d_train_*.bin"))
    steps = [(64, 24)] * 5 + [(96, 40)] * 4  # (micro-batch tokens, document cut), a stage change included
    expected = reference_steps(shards, 255, steps)
    assert len({id(s) for s in expected}) == len(steps)
    loaders = [tg.TrainLoader(shard_index(hp), hp, rank, world, torch.device("cpu"), 1280,
                              tg.CuSeqlensCapacity(log=lambda m: None)) for rank in range(world)]
    boundaries = 0
    for n, (T, max_len) in enumerate(steps):
        shard_before = loaders[0].position()[0]
        per_rank = [loader.next_step(T, max_len).micro_batches for loader in loaders]
        boundaries += loaders[0].position()[0] != shard_before
        for slot in range(8):
            mb = per_rank[slot % world][slot // world]
            got = np.append(mb.inputs.numpy(), mb.targets.numpy()[-1])
            np.testing.assert_array_equal(got, expected[n][slot], err_msg=f"step {n} slot {slot} world {world}")
    assert boundaries >= 3, "the test should cross several shard boundaries"


def test_bigram_rows_of_every_rank_are_tracked(tmp_path):
    """For the sparse exchange each rank knows the rows every rank's micro-batches touch: the same on every rank,
    and for its own micro-batches exactly the rows its lookups use."""
    rng = np.random.default_rng(3)
    write_shard(tmp_path / "b_train_000000.bin", doc_stream(rng, 300, max_len=40))
    hp = tg.Hyperparameters(**TINY, bos_id=255, train_files=str(tmp_path / "b_train_*.bin"))
    data = [tg.TrainLoader(shard_index(hp), hp, rank, 8, torch.device("cpu"), 1280, tg.CuSeqlensCapacity(log=print),
                           track_bigram_rows=True).next_step(64, 24) for rank in range(8)]
    for rank in range(8):
        assert all(np.array_equal(a, b) for a, b in zip(data[rank].bigram_rows, data[0].bigram_rows))
        np.testing.assert_array_equal(data[0].bigram_rows[rank], data[rank].micro_batches[0].bigram.numpy())


# --- optimizer numerics ---------------------------------------------------------------------------

def test_adam_rounds_the_weight_once():
    """p - update is computed in fp32 and rounded once to bf16 (rounding the update to bf16 first, then the
    difference, gives different weights)."""
    torch.manual_seed(0)
    p = torch.randn(4096).bfloat16()
    g = torch.randn(4096)
    avg, avg_sq = torch.zeros(4096), torch.zeros(4096)
    scalars = [torch.tensor(x) for x in (0.9, 0.95, 1e-10, 0.01, 0.0)]  # beta1, beta2, eps, step_size, decay
    exact = p.float()  # the same step on an fp32 copy: its result, rounded once, is what bf16 must hold
    tg.adam_update(exact, g, avg.clone(), avg_sq.clone(), *scalars)
    update = p.float() - exact
    twice = p - update.bfloat16()  # rounding the update first, then the difference
    tg.adam_update(p, g, avg, avg_sq, *scalars)
    assert torch.equal(p, exact.bfloat16())
    assert not torch.equal(p, twice), "the test needs inputs where double rounding differs"


def test_guard_sees_a_non_finite_gradient_shard_with_finite_losses():
    model = tiny_model()
    opt = tg.NorMuonAdam(model, tg.Hyperparameters(**TINY), cpu_runtime(), compile=False)
    guard = NonFiniteGuard(torch.device("cpu"), distributed=False)
    one = torch.tensor(1.0)
    random_gradients(model)
    guard.observe(0, torch.cat([one[None], opt.step(1.0, 0.9, do_adam=False)]))
    model.gradients()["x0_lambdas"][3] = float("nan")  # an Adam gradient: read at the next odd step
    guard.observe(1, torch.cat([one[None], opt.step(1.0, 0.9, do_adam=False)]))
    assert guard.read() == (None, False)
    guard.observe(2, torch.cat([one[None], opt.step(1.0, 0.9, do_adam=True)]))
    assert guard.read() == (2, False) and guard.published() == (None, False)  # published only by publish()
    guard.publish()
    assert guard.published() == (2, False)
    guard.request_stop()
    assert guard.read() == (2, True) and guard.published() == (2, False)


def test_squared_gradient_norm_sums_over_ranks_to_the_whole():
    """The optimizer's squared gradient norms, NorMuon's and Adam's: at world 1 those of every gradient it read but
    the token tables'; a rank of 8 holds its shards' squares and an eighth of the replicated gradients' (all-reduced:
    equal on every rank), so that the ranks' shares add up to the whole."""
    model = tiny_model()
    grads = {name: g.clone() for name, g in random_gradients(model).items()}  # step() zeroes the model's
    expected = torch.stack([sum(g.float().square().sum() for name, g in grads.items()
                                if name not in tg.NORM_SKIPS and tg.PARAM_RULES[name].optim == optim)
                            for optim in ("normuon", "adam")])
    opt = tg.NorMuonAdam(model, tg.Hyperparameters(**TINY), cpu_runtime(), compile=False)
    opt.untie()  # (tied, the head's gradient would take in the embedding's first)
    assert torch.allclose(opt.step(1.0, 0.9, do_adam=True), expected, rtol=1e-4)
    shares = []
    for rank in range(8):
        model = tiny_model()
        for g, full in zip(model.gradients().values(), grads.values()):
            g.copy_(full)
        opt = tg.NorMuonAdam(model, tg.Hyperparameters(**TINY), cpu_runtime(world_size=8, rank=rank), compile=False)
        opt.untie()
        opt.distributed = True  # shares for ranks that will be summed; the collectives themselves are skipped below
        opt._launch_reduce = lambda name, grad, opt=opt: (lambda shard=opt._shard(name, grad): shard)
        opt._launch_gather = lambda name: None
        shares.append(opt.step(1.0, 0.9, do_adam=True))
    assert torch.allclose(sum(shares), expected, rtol=1e-4)


@pytest.mark.parametrize("layer, position", [(0, 0), (5, 7), (10, 33)])
def test_a_non_finite_backward_reaches_the_checked_gradients_before_the_token_tables(layer, position):
    """The guard skips the token tables' shards (NORM_SKIPS): a NaN entering the stream's gradient at any layer
    and position must reach a gradient it checks, and the tables only after that."""
    model = tiny_model()
    opt = tg.NorMuonAdam(model, tg.Hyperparameters(**TINY), cpu_runtime(), compile=False)
    mb, sched = batch_for(model, 96)
    attention, layers = model._attention, iter(model.cfg.attn_layers)  # called once per attention layer, in order

    def poisoned(*args, **kwargs):  # layers 0, 5, 10 all have attention
        y = attention(*args, **kwargs)
        if next(layers) == layer:
            y.register_hook(lambda g: g.index_fill(0, torch.tensor([position]), float("nan")))
        return y
    model._attention = poisoned
    model(mb.inputs, mb.targets, mb.cu_seqlens, mb.bigram, sched).backward()
    grads = model.gradients()
    assert any(not grads[name].isfinite().all() for name in tg.NORM_SKIPS)  # it reached the tables too
    assert not opt.step(1.0, 0.9, do_adam=True).isfinite().all()


@pytest.mark.parametrize("world_size", [1, 8])  # 8: emulated, with the sparse exchange's touched rows
def test_snapshots_reuse_their_buffers_and_carry_gradients_only_after_even_steps(tmp_path, synthetic_data, world_size):
    hp = settings(TINY_FLAGS + ["--val_tokens", "2048", "--train_files", synthetic_data["train"],
                                "--val_files", synthetic_data["val"], "--num_scheduled_steps", "6", "--log_dir", str(tmp_path)])
    trainer = cpu_trainer(hp, world_size)
    for step in range(3):
        trainer.train_step(step, trainer.next_batches(step))
    odd = trainer.snapshot(3)  # after step 2 (NorMuon only): Adam's gradients are carried
    assert odd["carried"] is not None and odd["carried"]["grads"]["embed"].abs().sum() > 0
    trainer.train_step(3, trainer.next_batches(3))
    even = trainer.snapshot(4, into=odd)
    assert even["carried"] is None
    assert even["model"]["attn_bank"].data_ptr() == odd["model"]["attn_bank"].data_ptr()
    weights = trainer.model.attn_bank.detach().clone()
    trainer.train_step(4, trainer.next_batches(4))
    assert any(t.any() for t in trainer.optimizer.touched.values()) == (world_size == 8)  # step 4: rows touched
    trainer.restore(even)
    assert torch.equal(trainer.model.attn_bank, weights) and not trainer.model.gradients()["embed"].any()
    assert not any(t.any() for t in trainer.optimizer.touched.values())
    assert not any(f.any() for f in trainer.model.written_rows().values())
    trainer.restore(odd)
    assert torch.equal(trainer.model.gradients()["embed"], odd["carried"]["grads"]["embed"])
    assert all(f.all() for f in trainer.model.written_rows().values()), "restored gradients count as written everywhere"


def test_one_micro_batch_a_step_assigns_the_normuon_gradients(tmp_path, synthetic_data):
    """A rank of world 8 runs one micro-batch a step: autograd assigns the backward's NorMuon gradients (left None
    before it), which the optimizer then leaves as they are, instead of adding them to zeroed ones. Same losses and
    weights as accumulating; with gradient accumulation nothing is assigned."""
    hp = settings(TINY_FLAGS + ["--val_tokens", "2048", "--train_files", synthetic_data["train"],
                                "--val_files", synthetic_data["val"], "--num_scheduled_steps", "6", "--log_dir", str(tmp_path)])
    assert cpu_trainer(hp, 1).optimizer.assigned == []
    runs = []
    for assign in (True, False):
        trainer = cpu_trainer(hp, 8)
        assert trainer.optimizer.assigned == ["attn_bank", "mlp_bank"]
        if not assign:
            trainer.optimizer.assigned = trainer.assigned = []
        for step in range(4):
            trainer.train_step(step, trainer.next_batches(step))
            grads = trainer.model.gradients()
            assert grads["mlp_bank"].any() == assign  # the optimizer zeroes only what accumulates
            assert grads["scalars"].any() == (step % 2 == 0)  # Adam's, zeroed after its odd steps
        runs.append((trainer.metrics[:4], dict(trainer.model.named_parameters())))
    (metrics, weights), (expected_metrics, expected_weights) = runs
    assert torch.equal(metrics, expected_metrics)
    assert all(torch.equal(weights[name], expected_weights[name]) for name in weights), "a weight differs"


@pytest.mark.parametrize("world_size", [1, 8])  # 8: emulated
def test_adam_graphs_one_per_dtype_pair_and_static_ones_for_the_tables(world_size):
    """The optimizer hands adam_update flat tensors that are not views, so every small Adam parameter, whatever its
    shape, shares the dynamic graph of its (weight, gradient) dtypes: shaped, they compiled 7 graphs, about 6 s of an
    H100's cold start (records/enwiki-124/2026-11-26_adam-flat-graphs). The head and token tables (sharded) never
    use those: a dynamic graph's kernels suit its first call's size, and a gate's ran a table's update 6x slower than
    its own static graph (records/enwiki-124/2026-11-28_adam-table-graphs). An emulated rank updates its tables from
    the bf16 copies a real rank sends (the sparse bigram table's merge is fp32 on both). Counted by backends that
    compile nothing; later steps reuse every graph."""
    model = tiny_model()
    opt = tg.NorMuonAdam(model, tg.Hyperparameters(**TINY), cpu_runtime(world_size), compile=False)
    names = {opt._adam_flat[name][0].data_ptr(): name for name in opt._adam_flat}
    torch._dynamo.reset()
    graphs, calls = {True: [], False: []}, {True: set(), False: set()}

    def counted(dynamic: bool):
        compiled = torch.compile(tg.adam_update, backend=lambda gm, inputs: graphs[dynamic].append(inputs) or gm.forward,
                                 dynamic=dynamic, fullgraph=True)

        def update(p, g, *rest):
            assert p.dim() == g.dim() == 1 and not p._is_view() and not g._is_view()
            calls[dynamic].add((names[p.data_ptr()], p.dtype, g.dtype, p.numel()))
            return compiled(p, g, *rest)
        return update
    opt._adam_update, opt._adam_table_update = counted(True), counted(False)
    for untie in (True, False, False):  # tied (the embedding rides on the head), then untied, twice
        random_gradients(model)
        opt.step(1.0, 0.9, do_adam=True)
        if untie:
            opt.untie()
    adam = {name for name, rule in tg.PARAM_RULES.items() if rule.optim == "adam"}
    tables = {name for name in adam if tg.PARAM_RULES[name].sharded}
    assert {c[0] for c in calls[False]} == tables and {c[0] for c in calls[True]} == adam - tables
    assert len(graphs[True]) == len({c[1:3] for c in calls[True]}) <= 2, calls[True]
    assert len(graphs[False]) == len({c[1:] for c in calls[False]}), calls[False]
    assert not any(isinstance(x, torch.SymInt) for inputs in graphs[False] for x in inputs)  # static shapes
    wire = {name: g for name, _, g, _ in calls[False]}
    if world_size == 1:
        assert wire == dict(lm_head=torch.bfloat16, embed=torch.float32, value_embeds=torch.float32,
                            bigram_embed=torch.float32)
    else:
        assert wire == dict(lm_head=torch.bfloat16, embed=torch.bfloat16, value_embeds=torch.bfloat16,
                            bigram_embed=torch.float32)

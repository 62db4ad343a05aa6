"""tools/project_8gpu.py: the calibration on the reference, the projection, the totals and the CLI on the real ledger.

    python3 -m pytest -q -p no:cacheprovider tests/test_project_8gpu.py
"""
import importlib
import json
import math
import subprocess
import sys

import pytest

from tests.utils import REPO

proj = importlib.import_module("tools.project_8gpu")

TOOLS = REPO / "tools"

# A hand-made ledger: every step kind sends 2e9 bytes in the reference's accounting. Adam steps carry a sparse
# all-to-all of 1e6 bigram rows (1.536e9 bytes of bf16 rows, to which the reference adds 4e6 bytes of int32 indices),
# so the project sends 4e6 bytes less on an Adam step.
ROWS = 1_000_000
SPARSE = dict(param="bigram_embed", op="all_to_all", elements=ROWS * 768, wire_bytes=ROWS * 768 * 2)
DENSE_ADAM = dict(param="value_embeds", op="reduce_scatter", elements=1,
                  wire_bytes=2e9 - SPARSE["wire_bytes"] - 4 * ROWS)
LEDGER = {f"stage {s}": {"normuon": [dict(param="mlp_bank", op="reduce_scatter", elements=1, wire_bytes=2e9)],
                         "adam_tied": [DENSE_ADAM, SPARSE], "adam_untied": [DENSE_ADAM, SPARSE]} for s in (1, 2, 3)}
B, OPT1, OPT8 = 400.0, 10.0, 2.0  # 2e9 bytes at 400 GB/s: 5 ms


def hand_case():
    return proj.project(LEDGER, (224, 428, 637), (31, 56, 82), OPT1, OPT8, B)


def test_step_kinds_follow_the_schedule():
    assert proj.kind_counts(0, 483) == {"normuon": 242, "adam_tied": 241}  # Adam on odd steps
    assert proj.kind_counts(483, 967) == {"normuon": 242, "adam_tied": 242}
    assert proj.kind_counts(967, 1450) == {"normuon": 241, "adam_untied": 242}  # untied from step 967 on
    assert proj.kind_counts(1450, 1490) == {"normuon": 20, "adam_untied": 20}


def test_reference_adds_an_index_per_sparse_row():
    assert proj.step_bytes([DENSE_ADAM, SPARSE], reference=True) == 2e9
    assert proj.step_bytes([DENSE_ADAM, SPARSE], reference=False) == 2e9 - 4 * ROWS


def test_calibration_reproduces_the_published_times():
    """Each stage's own alpha puts the reference exactly on its published ms/step (whatever the inputs)."""
    for opt1, opt8, bus in ((OPT1, OPT8, B), (6.0, 1.0, 340.0), (0.0, 0.0, 100.0)):
        r = proj.project(LEDGER, (1, 1, 1), (1, 1, 1), opt1, opt8, bus)
        for st, published in zip(r["stages"], proj.REF_8GPU_MS):
            assert proj.predict_ms(st["ref_compute_ms"], st["alpha"], st["ref_comm_ms"]) == pytest.approx(published,
                                                                                                         abs=1e-12)


def test_alpha_by_hand():
    """compute = (t1 - 10)/8 + 2: stage 1 (263 ms) 33.625 > 32.4 published, so alpha < 0 (clamped to 0 in the mean);
    stage 2 (462) 58.5, alpha = (58.7 - 58.5)/5 = 0.04; stage 3 (674) 85.0, alpha = (85.4 - 85.0)/5 = 0.08."""
    r = hand_case()
    computes = [st["ref_compute_ms"] for st in r["stages"]]
    assert computes == pytest.approx([33.625, 58.5, 85.0], abs=1e-12)
    assert [st["ref_comm_ms"] for st in r["stages"]] == pytest.approx([5.0] * 3, abs=1e-12)
    alphas = [st["alpha"] for st in r["stages"]]
    assert alphas == pytest.approx([(32.4 - 33.625) / 5, 0.04, 0.08], abs=1e-12)
    assert r["alpha"] == pytest.approx((0 + 0.04 + 0.08) / 3, abs=1e-12)
    assert r["alpha_fit_spread"] == pytest.approx(0.04, abs=1e-12)


def test_project_prediction_by_hand():
    """Stage 3: 241 NorMuon steps of 2e9 bytes, 242 Adam steps of 2e9 - 4e6: the project's comm is
    (2e9 - 4e6 * 242/483) / 400e9 s, its prediction 82 + alpha * comm with alpha = 0.04."""
    r = hand_case()
    st = r["stages"][2]
    comm = (2e9 - 4e6 * 242 / 483) / 400e9 * 1e3
    assert st["project_comm_ms"] == pytest.approx(comm, abs=1e-12)
    assert st["project_predicted_ms"] == pytest.approx(82 + 0.04 * comm, abs=1e-9)
    d_alpha_ref = 0.02 / 8 / 5 * (263 + 462 + 674) / 3  # the reference's 1-GPU times +-2%, through alpha
    assert st["project_uncertainty_ms"] == pytest.approx(math.hypot(0.04 * comm, d_alpha_ref * comm, 0.02 * 82))


def test_totals_weight_stages_by_their_steps():
    assert proj.total_s((1, 0, 0)) == pytest.approx(0.483)
    assert proj.total_s((0, 1, 0)) == pytest.approx(0.484)
    assert proj.total_s((0, 0, 1)) == pytest.approx(0.523)  # stage 3 and the 40 extension steps
    r = hand_case()
    expected = sum(st["project_predicted_ms"] * n for st, n in zip(r["stages"], (483, 484, 523))) / 1e3
    assert r["project_total_s"] == pytest.approx(expected)
    assert r["ref_total_from_stages_s"] == pytest.approx(proj.REF_8GPU_TOTAL_S, abs=0.2)  # the log's rates add up


def test_check_at_a_measured_world_by_hand():
    """Emulated 10 / 20 / 30 ms plus alpha = 0.1 of the stage's collectives (Adam steps 4e6 bytes short of 2e9, at
    400 GB/s) against measured 12 / 20 / 31 ms: missed is measured - predicted, its total weighted by the steps."""
    c = proj.check_world(LEDGER, 0.1, (10, 20, 30), (12, 20, 31), B)
    adam_steps = (241, 242, 242)
    cases = zip(c["stages"], (10, 20, 30), (12, 20, 31), adam_steps, (483, 484, 483))
    for st, emulated, measured, adam, steps in cases:
        comm = (2e9 - 4e6 * adam / steps) / 400e9 * 1e3
        assert st["comm_ms"] == pytest.approx(comm, abs=1e-12)
        assert st["predicted_ms"] == pytest.approx(emulated + 0.1 * comm, abs=1e-12)
        assert st["missed_ms"] == pytest.approx(measured - emulated - 0.1 * comm, abs=1e-12)
    assert c["missed_total_s"] == pytest.approx(sum(st["missed_ms"] * n for st, n in zip(c["stages"], (483, 484, 523)))
                                                / 1e3)


def test_cli_checks_the_model_at_world_2_and_refuses_other_worlds(capsys):
    numbers = ["--project_1gpu", "224,428,637", "--project_emulated8", "31,56,82"]
    proj.main([*numbers, "--check", "2", "100,200,300", "110,210,310"])
    text = capsys.readouterr().out
    assert "the model at world 2, measured" in text and "if world 8 pays what the model missed here" in text
    twice = ["--check", "2", "1,2,3", "1,2,3"]
    for bad in (["--check", "8", "1,2,3", "1,2,3"], ["--check", "3", "1,2,3", "1,2,3"],
                ["--check", "2", "1,2", "1,2,3"], twice + twice):
        with pytest.raises(SystemExit):
            proj.main([*numbers, *bad])
        err = capsys.readouterr().err
        assert err.startswith("error: --check") and err.count("\n") == 1, err


def test_cli_rejects_a_wrong_number_of_stages(capsys):
    with pytest.raises(SystemExit):
        proj.main(["--project_1gpu", "224,428", "--project_emulated8", "31,56,82"])
    assert "expected 3" in capsys.readouterr().err


def test_cli_end_to_end_on_the_real_ledger(tmp_path):
    """comm_ledger.py's JSON, and the ledger built in-process when --ledger is omitted, give the same projection;
    its bytes are the ledger's and its calibration reproduces the published times."""
    def run(script, *args):
        out = subprocess.run([sys.executable, str(TOOLS / script), *args], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout
    run("comm_ledger.py", "--world_size", "8", "--json", str(tmp_path / "ledger.json"))
    numbers = ["--project_1gpu", "224,428,637", "--project_emulated8", "31,56,82"]
    text = run("project_8gpu.py", *numbers, "--ledger", str(tmp_path / "ledger.json"), "--json", str(tmp_path / "a"))
    run("project_8gpu.py", *numbers, "--json", str(tmp_path / "b"))
    a, b = (json.loads((tmp_path / name).read_text()) for name in "ab")
    assert a == b
    assert "stage 3" in text and "88.8 s published" in text
    ledger = json.loads((tmp_path / "ledger.json").read_text())["stages"]
    for s, st in enumerate(a["stages"], 1):
        for kind, nbytes in st["bytes_by_kind"].items():
            assert nbytes["project"] == sum(row["wire_bytes"] for row in ledger[f"stage {s}"][kind])
            extra = nbytes["reference"] - nbytes["project"]  # the bigram rows' indices: 4 bytes per 1536-byte row
            assert extra == 0 if kind == "normuon" else 0 < extra < 1e6
        assert st["ref_compute_ms"] + st["alpha"] * st["ref_comm_ms"] == pytest.approx(st["ref_published_ms"])
        assert st["project_predicted_ms"] > st["project_emulated_ms"] or st["alpha"] <= 0

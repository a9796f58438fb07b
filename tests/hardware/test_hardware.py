"""Hardware profiles: catalog arithmetic, clock scaling, lookup, files, the CLI, calibration."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from solforge.cli import app
from solforge.errors import HardwareError
from solforge.hardware import (
    DATASHEETS,
    HardwareProfile,
    datasheet_for_device,
    load_profile,
    save_profile,
)


@pytest.mark.parametrize("name", list(DATASHEETS))
def test_each_datasheet_peak_is_sms_times_rate_per_sm_times_clock(name):
    sheet = DATASHEETS[name]
    for peak in sheet.peaks:
        product = sheet.sm_count * peak.per_clock_per_sm * peak.clock_mhz * 1e6
        # Datasheets round (H100 fp64: 33.5 quoted as 34; B200 tf32: 1.125 P quoted as 1.1 P).
        assert product == pytest.approx(peak.per_s, rel=0.025), (name, peak.unit)


def test_hopper_tensor_and_cuda_core_figures_hold_at_different_clocks():
    h200 = load_profile("h200")
    assert h200.peak_clocks_mhz["tensor.bf16"] == 1830
    assert h200.peak_clocks_mhz["simt.fp32"] == 1980
    assert h200.peak("tensor.bf16") == 989.4e12  # dense: the page's 1,979 is with sparsity


@pytest.mark.parametrize("spec", ["h200", "H200-SXM", "h200_sxm", " H200 ", "H200-SXM5"])
def test_aliases_are_case_insensitive(spec):
    assert load_profile(spec).name == "H200-SXM"


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(HardwareError, match="A100-SXM-80GB, H100-SXM, H200-SXM, B200"):
        load_profile("V100")


def test_b200_at_1500_mhz_reproduces_solar_within_one_percent():
    # configs/arch/B200.yaml of NVlabs/SOLAR: MAC/clk x 2 x 1.5 GHz.
    b200 = load_profile("B200@1500MHz")
    assert b200.kind == "clock-locked"
    assert b200.peak("tensor.bf16") == pytest.approx(603_751 * 2 * 1.5e9, rel=0.01)  # 1.811 P
    assert b200.peak("tensor.fp8") == pytest.approx(1_207_501 * 2 * 1.5e9, rel=0.01)  # 3.62 P
    assert b200.peak("tensor.fp4") == pytest.approx(2_415_000 * 2 * 1.5e9, rel=0.01)  # 7.245 P
    assert b200.dram_bytes_per_s == pytest.approx(5111.6 * 1.5e9, rel=0.01)  # not scaled
    assert load_profile("b200@1.5GHz") == b200


def test_at_clock_scales_each_peak_by_its_own_clock_and_leaves_dram_alone():
    h200 = load_profile("H200")
    locked = h200.at_clock(1830)
    assert locked.peak("tensor.bf16") == pytest.approx(989.4e12)
    assert locked.peak("simt.fp32") == pytest.approx(67e12 * 1830 / 1980)
    assert locked.dram_bytes_per_s == h200.dram_bytes_per_s
    fastest = h200.at_max_clock()
    assert fastest.peak("tensor.bf16") == pytest.approx(989.4e12 * 1980 / 1830)
    assert fastest.peak("simt.fp32") == pytest.approx(67e12)
    assert fastest.at_max_clock() is fastest
    with pytest.raises(HardwareError, match="2500 MHz"):
        h200.at_clock(2500)


def test_missing_unit_names_unit_and_profile():
    h100 = load_profile("H100")
    assert not h100.has("tensor.fp4")
    with pytest.raises(HardwareError, match=r"H100-SXM has no tensor\.fp4"):
        h100.peak("tensor.fp4")
    with pytest.raises(HardwareError, match="unknown compute unit"):
        h100.peak("tensor.fp7")


def test_onchip_bytes_is_l2_plus_every_sm_storage():
    h200 = load_profile("H200")
    assert h200.onchip_bytes == 62_914_560 + 132 * (228 * 1024 + 256 * 1024)
    b200 = load_profile("B200")
    assert b200.onchip_bytes == 126 * 2**20 + 148 * (228 * 1024 + 256 * 1024 + 256 * 1024)


def test_device_names_match_exactly():
    assert datasheet_for_device("NVIDIA H200").name == "H200-SXM"
    assert datasheet_for_device("NVIDIA H100 80GB HBM3").name == "H100-SXM"
    assert datasheet_for_device("NVIDIA H100 PCIe") is None
    assert datasheet_for_device("NVIDIA H200 NVL") is None


def test_profile_round_trips_through_a_json_file(tmp_path):
    profile = load_profile("B200@1500MHz")
    assert HardwareProfile.from_dict(profile.to_dict()) == profile
    path = tmp_path / "b200.json"
    save_profile(profile, path, extra={"calibration": {"measurements": []}})
    assert load_profile(str(path)) == profile
    relocked = load_profile(f"{path}@1000MHz")
    assert relocked.peak("tensor.bf16") == pytest.approx(profile.peak("tensor.bf16") / 1.5)


@pytest.mark.parametrize(("change", "message"), [
    ({"peaks": {"tensor.fp7": 1.0}}, "unknown unit"),
    ({"peaks": {"tensor.bf16": -1.0}, "peak_clocks_mhz": {"tensor.bf16": 1830}}, "positive"),
    ({"peaks": {"tensor.bf16": 1.0}, "peak_clocks_mhz": {}}, "no positive clock"),
    ({"kind": "guessed"}, "kind"),
    ({"colour": "green"}, "unknown fields"),
    ({"sm_count": "many"}, "malformed"),
])
def test_bad_profile_files_say_what_is_wrong(tmp_path, change, message):
    data = {**load_profile("H200").to_dict(), **change}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(HardwareError, match=message) as raised:
        load_profile(str(path))
    assert str(path) in str(raised.value)


def test_missing_profile_file():
    with pytest.raises(HardwareError, match="no such hardware profile file"):
        load_profile("nowhere/h200.json")
    data = load_profile("H200").to_dict()
    del data["l2_bytes"]
    with pytest.raises(HardwareError, match="missing fields"):
        HardwareProfile.from_dict(data)


def test_hardware_cli_lists_and_shows():
    runner = CliRunner()
    listed = runner.invoke(app, ["hardware", "list"])
    assert listed.exit_code == 0
    for name in DATASHEETS:
        assert name in listed.output
    shown = runner.invoke(app, ["hardware", "show", "B200@1500MHz"])
    assert shown.exit_code == 0
    assert "1,818.4" in shown.output  # bf16 TFLOP/s at 1.5 GHz
    assert "nvidia.com/en-us/data-center/hgx" in shown.output
    unknown = runner.invoke(app, ["hardware", "show", "V100"])
    assert isinstance(unknown.exception, HardwareError)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_calibrate_without_a_gpu_is_a_clear_error():
    result = CliRunner().invoke(app, ["calibrate"])
    assert isinstance(result.exception, HardwareError)
    assert "needs a CUDA GPU" in str(result.exception)


@pytest.mark.gpu
def test_calibrate_measures_rates_below_the_physical_ceiling(tmp_path):
    from solforge.hardware.calibrate import calibrate

    result = calibrate(iterations=10, warmup=2, bandwidth_bytes=512 * 2**20, matmul_n=4096)
    profile = result.profile
    assert profile.kind == "measured"
    assert {"tensor.bf16", "tensor.fp16", "tensor.tf32", "simt.fp32"} <= set(profile.peaks)
    if result.datasheet is not None:
        ceiling = result.datasheet.at_max_clock()
        for m in result.measurements:  # nothing beats the datasheet at the maximum clock
            limit = ceiling.dram_bytes_per_s if m.unit is None else ceiling.peak(m.unit)
            assert 0 < m.rate <= limit, m.name
        # cuBLAS bf16 and a plain copy reach well over a third of the datasheet figures.
        assert profile.peak("tensor.bf16") > 0.35 * result.datasheet.peak("tensor.bf16")
        assert profile.dram_bytes_per_s > 0.35 * result.datasheet.dram_bytes_per_s
    path = tmp_path / "measured.json"
    save_profile(profile, path)
    assert load_profile(str(path)) == profile

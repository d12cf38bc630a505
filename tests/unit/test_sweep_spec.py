"""Sweep spec parsing, axis ranges and cell naming (sim/sweep/spec.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from sim.sweep.spec import (
    CapacitySettings,
    SpecError,
    cell_name,
    load_spec,
    value_text,
    value_token,
)

KNOWN = {"trace", "allocators", "rate_scale", "block_size", "max_num_seqs", "limit", "seed",
         "chunked_prefill", "out", "progress"}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(text)
    return path


def error_of(tmp_path: Path, text: str, known: set[str] | None = KNOWN) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(write(tmp_path, text), known)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_grid_is_the_product_in_axis_order(tmp_path: Path) -> None:
    """Cells enumerate the product of the axes, first axis slowest, named key=value."""
    spec = load_spec(write(tmp_path, """
[options]
allocators = ["paged", "max"]
[axes]
rate_scale = [0.5, 2]
block_size = {values = [8, 16]}
"""), KNOWN)
    names = [c.name for c in spec.cells()]
    assert names == ["rate_scale=0.5__block_size=8", "rate_scale=0.5__block_size=16",
                     "rate_scale=2__block_size=8", "rate_scale=2__block_size=16"]
    cell = spec.cells()[3]
    assert spec.cell_options(cell) == {"allocators": ["paged", "max"], "rate_scale": 2,
                                       "block_size": 16}


def test_ranges_include_stop_and_keep_ints(tmp_path: Path) -> None:
    """step, factor and num ranges include stop; integer ranges stay integers."""
    spec = load_spec(write(tmp_path, """
[axes]
max_num_seqs = {start = 64, stop = 256, step = 64}
rate_scale = {start = 0.1, stop = 0.5, step = 0.1}
limit = {start = 1, stop = 16, factor = 2}
seed = {start = 0, stop = 1, num = 3}
"""), KNOWN)
    assert spec.axes["max_num_seqs"] == [64, 128, 192, 256]
    assert spec.axes["rate_scale"] == [0.1, 0.2, 0.3, 0.4, 0.5]
    assert spec.axes["limit"] == [1, 2, 4, 8, 16]
    assert spec.axes["seed"] == [0.0, 0.5, 1.0]
    assert len(spec.cells(skip=("seed",))) == 4 * 5 * 5


def test_without_axes_one_base_cell(tmp_path: Path) -> None:
    """A spec without axes has one cell called "base" holding the fixed options."""
    spec = load_spec(write(tmp_path, "[options]\nlimit = 5\n"), KNOWN)
    assert [(c.name, c.params) for c in spec.cells()] == [("base", {})]


def test_trace_resolved_against_the_spec_directory(tmp_path: Path) -> None:
    """A relative trace path is taken relative to the spec file, and dashes become snake."""
    spec = load_spec(write(tmp_path, '[options]\ntrace = "data/t.csv"\nblock-size = 8\n'), KNOWN)
    assert spec.options == {"trace": str((tmp_path / "data/t.csv").resolve()), "block_size": 8}


def test_capacity_table(tmp_path: Path) -> None:
    """[capacity] overrides the defaults (SLO 0.2 s/token, 2 % tolerance)."""
    spec = load_spec(write(tmp_path, "[capacity]\nslo = 0.05\ntolerance = 0.1\n"), KNOWN)
    assert spec.capacity == CapacitySettings(slo=0.05, tolerance=0.1)
    assert CapacitySettings().slo == 0.2


def test_names_are_stable_and_filesystem_safe() -> None:
    """Integral floats drop ".0", lists join by ",", unsafe text gets a hash suffix."""
    assert value_text(2.0) == "2" and value_text(0.25) == "0.25"
    assert value_text(["paged", "max"]) == "paged,max" and value_text(True) == "true"
    assert cell_name({"rate_scale": 2.0, "block_size": 16}) == "rate_scale=2__block_size=16"
    odd = value_token("model", "/models/my model/config.json")
    assert "/" not in odd and " " not in odd
    assert odd == value_token("model", "/models/my model/config.json")
    assert value_token("model", "/a/config.json") != value_token("model", "/b/config.json")
    assert value_token("trace", "/data/azure.csv").startswith("azure.csv-")


@pytest.mark.parametrize("text, expected", [
    ("bogus = 1\n", "bogus: unknown key"),
    ("[options]\nblok_size = 8\n",
     "options.blok_size: not a simulate.py option (did you mean block_size?)"),
    ("[options]\nout = 'x'\n", "options.out: not allowed in a sweep"),
    ("[options]\nlimit = 5\n[axes]\nlimit = [1, 2]\n", "axes.limit: also set in [options]"),
    ("[axes]\nlimit = 5\n", "axes.limit: expected a list or a table"),
    ("[axes]\nlimit = []\n", "axes.limit: no values"),
    ("[axes]\nlimit = {start = 1, stop = 4}\n", "axes.limit: a range needs start, stop"),
    ("[axes]\nlimit = {start = 1, stop = 4, stpe = 1}\n", "axes.limit.stpe: unknown range key"),
    ("[axes]\nlimit = {start = 4, stop = 1, step = 1}\n", "axes.limit: stop 1 is below start"),
    ("[axes]\nrate_scale = [2, 2.0]\n", "axes.rate_scale: values 2 and 2.0 name the same"),
    ("[axes]\nseed = [{a = 1}]\n", "axes.seed: expected a string, number or boolean"),
    ("[capacity]\nslo = -1\n", "capacity: slo must be a positive number"),
    ("[capacity]\nsol = 1\n", "capacity.sol: unknown key (did you mean slo?)"),
    ("[options\n", "invalid TOML"),
    ("[options]\ntrace = 5\n", "options.trace: expected a path string"),
])
def test_bad_specs_name_file_and_key(tmp_path: Path, text: str, expected: str) -> None:
    """Every bad spec raises one line starting with the file and naming the key."""
    message = error_of(tmp_path, text)
    assert message.startswith(str(tmp_path / "spec.toml") + ": ")
    assert expected in message


def test_missing_file(tmp_path: Path) -> None:
    """A spec that cannot be read is a SpecError naming the path."""
    with pytest.raises(SpecError, match="cannot read the sweep spec"):
        load_spec(tmp_path / "absent.toml")


def test_unknown_names_pass_without_a_known_list(tmp_path: Path) -> None:
    """With no option list (tests, fake runners) any snake_case name is accepted."""
    spec = load_spec(write(tmp_path, "[axes]\nwhatever = [1, 2]\n"), None)
    assert spec.axes == {"whatever": [1, 2]}

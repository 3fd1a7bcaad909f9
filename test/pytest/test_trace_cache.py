"""The trace cache (`emmy.frontend.trace_cache`): `emmy compile` keeps a model's torch-stage IR
under EMMY_HOME/traces, so a repeated compile gives the same output without importing torch; the
key follows everything the trace depends on; a damaged entry or an unwritable folder is never an
error. (How much time a hit saves is measured with tools/compile_bench.py, not asserted.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from emmy.driver import CompileOptions, compile_model, compile_whole_model
from emmy.frontend import resolve_model
from emmy.frontend import trace_cache
from emmy.frontend.trace_cache import SUBDIR, CachedPart, TraceCache, source_hash
from emmy.ir_io import print_module
from tiny_models import write_tiny_model

REPO = Path(__file__).resolve().parents[2]

# One compile in a fresh process: its exit code and whether it imported torch.
_COMPILE = textwrap.dedent(
    """
    import sys
    from emmy.cli.main import run
    code = run(sys.argv[1:])
    print("exit", code, "torch imported:", "torch" in sys.modules)
    """
)


def _compile_in_fresh_process(args: list[str], home: Path, dump: Path) -> str:
    env = {**os.environ, "EMMY_HOME": str(home), "EMMY_DUMP_DIR": str(dump)}
    out = subprocess.run(
        [sys.executable, "-c", _COMPILE, "compile", *args, "--target", "sm_90"],
        capture_output=True, text=True, env=env, cwd=REPO, check=True,
    )
    return out.stdout.replace(str(dump), "DUMP")


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("layer", [["--layer", "1"], []], ids=["layer", "whole-model"])
def test_a_hit_gives_identical_output_and_imports_no_torch(tmp_path, layer):
    model = write_tiny_model(tmp_path / "tiny")
    args = [model, *layer, "--tokens", "16"]
    home = tmp_path / "home"
    first = _compile_in_fresh_process(args, home, tmp_path / "dump1")
    assert first.endswith("exit 0 torch imported: True\n")
    assert len(list((home / SUBDIR).glob("*.json"))) == 1
    second = _compile_in_fresh_process(args, home, tmp_path / "dump2")
    assert second.endswith("exit 0 torch imported: False\n")
    assert second.replace("False", "True") == first  # the same summary, the same files written
    one, two = _files(tmp_path / "dump1"), _files(tmp_path / "dump2")
    assert len(one) > 10 and one == two  # every .mlir, .cu, decisions.json, byte for byte


def test_a_factory_is_not_cached(tmp_path):
    source = resolve_model(f"{REPO / 'tools' / 'running_example.py'}:make")
    assert TraceCache.open(tmp_path, source, layer=0, tokens=8, seed=0, tracer="capture") is None
    options = CompileOptions(f"{REPO / 'tools' / 'running_example.py'}:make", tokens=8, stop_after="torch",
                             cache_dir=str(tmp_path))
    compile_model(options)
    assert not (tmp_path / SUBDIR).exists()


def test_no_cache_folder_means_no_cache(tmp_path):
    source = resolve_model(write_tiny_model(tmp_path / "tiny"))
    assert TraceCache.open("", source, layer=0, tokens=8, seed=0, tracer="capture") is None


def _key(source, **changes) -> str:
    fields = {"layer": 0, "tokens": 16, "seed": 0, "tracer": "capture"} | changes
    cache = TraceCache.open("/nonexistent", source, **fields)
    assert cache is not None
    return cache.key


def test_the_key_follows_what_the_trace_depends_on(tmp_path, monkeypatch):
    directory = tmp_path / "tiny"
    source = resolve_model(write_tiny_model(directory))
    key = _key(source)
    assert _key(resolve_model(str(directory))) == key  # stable
    others = [
        _key(source, tokens=17), _key(source, layer=1), _key(source, layer=None), _key(source, seed=1),
        _key(source, tracer="export"), _key(resolve_model("Qwen/Qwen3-Embedding-0.6B")),
    ]
    # the config's content
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 1e-5}))
    others.append(_key(resolve_model(str(directory))))
    # weights: a safetensors file appears, then changes size, then only its mtime
    weights = directory / "model.safetensors"
    weights.write_bytes(b"x" * 10)
    others.append(_key(resolve_model(str(directory))))
    weights.write_bytes(b"x" * 11)
    others.append(_key(resolve_model(str(directory))))
    st = weights.stat()
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    others.append(_key(resolve_model(str(directory))))
    assert len(set(others + [key])) == len(others) + 1
    # Emmy's source and the packages' versions
    monkeypatch.setattr(trace_cache, "source_hash", lambda: "changed source")
    changed_source = _key(source)
    monkeypatch.setattr(trace_cache, "package_versions", lambda: {"torch": "0.0"})
    changed_versions = _key(source)
    assert len({key, changed_source, changed_versions}) == 3


def test_the_source_hash_covers_every_source_file(tmp_path):
    tree = tmp_path / "emmy"
    (tree / "frontend").mkdir(parents=True)
    (tree / "frontend" / "trace.py").write_text("x = 1\n")
    (tree / "models").mkdir()
    (tree / "models" / "m.json").write_text("{}")
    hashes = [source_hash(tree)]
    (tree / "frontend" / "trace.py").write_text("x = 2\n")
    hashes.append(source_hash(tree))
    (tree / "passes").mkdir()
    (tree / "passes" / "new.py").write_text("")
    hashes.append(source_hash(tree))
    (tree / "models" / "m.json").write_text('{"a": 1}')
    hashes.append(source_hash(tree))
    (tree / "notes.txt").write_text("not source")
    hashes.append(source_hash(tree))
    assert len(set(hashes)) == 4 and hashes[-1] == hashes[-2]
    assert source_hash() != hashes[0]  # the default is Emmy's own tree


def _compile_layer(model: str, home: Path | None):
    options = CompileOptions(model, layer=1, tokens=16, target="sm_90", cache_dir=str(home or ""))
    result = compile_model(options)
    return result, print_module(result.module)


@pytest.mark.parametrize(
    "damage",
    ["", "{not json", '{"format": 1}', "[]", "not-utf8", "valid-json-bad-ir", "other-key"],
    ids=["empty", "truncated", "missing-fields", "not-an-object", "not-utf8", "bad-ir", "other-key"],
)
def test_a_corrupt_entry_is_ignored_and_rewritten(tmp_path, damage):
    model = write_tiny_model(tmp_path / "tiny")
    home = tmp_path / "home"
    traced, expected = _compile_layer(model, home)
    assert not isinstance(traced.traced, CachedPart)
    [entry] = (home / SUBDIR).glob("*.json")
    good = json.loads(entry.read_text())
    if damage == "valid-json-bad-ir":
        good["parts"][0]["ir"] = "builtin.module { this is not IR"
        entry.write_text(json.dumps(good))
    elif damage == "other-key":
        entry.write_text(json.dumps({**good, "key": "0" * 64}))
    elif damage == "not-utf8":
        entry.write_bytes(b"\xff\xfe\x00")
    else:
        entry.write_text(damage)
    again, text = _compile_layer(model, home)
    assert text == expected and not isinstance(again.traced, CachedPart)  # traced again
    assert json.loads(entry.read_text()) == good or damage == "valid-json-bad-ir"
    hit, text = _compile_layer(model, home)  # the rewritten entry is read
    assert text == expected and isinstance(hit.traced, CachedPart)


def test_an_unwritable_cache_folder_means_no_caching(tmp_path):
    model = write_tiny_model(tmp_path / "tiny")
    (tmp_path / "blocked").write_text("a file where the cache folder would be")
    home = tmp_path / "blocked" / "home"
    _, expected = _compile_layer(model, None)  # no cache
    for _ in range(2):
        result, text = _compile_layer(model, home)
        assert not isinstance(result.traced, CachedPart) and text == expected
    assert not home.exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_cache_folder_means_no_caching(tmp_path):
    model = write_tiny_model(tmp_path / "tiny")
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o500)
    try:
        result, _ = _compile_layer(model, home)
        result, _ = _compile_layer(model, home)
        assert not isinstance(result.traced, CachedPart) and list(home.iterdir()) == []
    finally:
        home.chmod(0o700)


def test_the_cli_compile_of_an_unwritable_home_succeeds(tmp_path, monkeypatch, capsys):
    from emmy.cli.main import run

    model = write_tiny_model(tmp_path / "tiny")
    (tmp_path / "blocked").write_text("")
    monkeypatch.setenv("EMMY_HOME", str(tmp_path / "blocked" / "home"))
    monkeypatch.delenv("EMMY_DUMP_DIR", raising=False)
    assert run(["compile", model, "--layer", "0", "--tokens", "8", "--target", "sm_90"]) == 0
    assert "kernel launches" in capsys.readouterr().out


def test_a_whole_model_hit_keeps_the_parts_and_their_layers(tmp_path):
    model = write_tiny_model(tmp_path / "tiny")
    options = CompileOptions(model, layer=None, tokens=8, target="sm_90", cache_dir=str(tmp_path / "home"))
    traced = compile_whole_model(options)
    hit = compile_whole_model(options)
    assert traced.traced is not None and hit.traced is None  # the second read the cache
    assert [(p.name, p.layers) for p in hit.parts] == [("embed_tokens", []), ("layer0", [0, 1]), ("norm", [])]
    assert [(p.name, p.layers) for p in traced.parts] == [(p.name, p.layers) for p in hit.parts]
    assert [print_module(p.result.module) for p in traced.parts] == [print_module(p.result.module) for p in hit.parts]


def test_a_failed_trace_writes_no_entry(tmp_path):
    from emmy.diagnostics import EmmyError

    model = write_tiny_model(tmp_path / "tiny")
    home = tmp_path / "home"
    for _ in range(2):  # the error comes again: nothing was cached
        with pytest.raises(EmmyError, match="layer 5 is out of range"):
            compile_model(CompileOptions(model, layer=5, tokens=8, target="sm_90", cache_dir=str(home)))
    assert not list(home.glob(f"{SUBDIR}/*.json"))

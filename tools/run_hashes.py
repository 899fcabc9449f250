"""Run identities of every committed params file and of the named recipes: label -> [config hash, run name,
sha256 of the serialized config.yaml]. A change of TrainConfig's internals must leave all of them as they are
(tests/test_config_run_hashes.py compares against tests/data/run_hashes.json, written by this script on the code
before a change):

    python tools/run_hashes.py              # print the JSON
    python tools/run_hashes.py --write      # (re)write tests/data/run_hashes.json: only when a hash change is meant

What is covered: the named and block recipes (with every switch) and fmt:<FMT> of each format of 01 on the default
config; each notebook params file's TrainConfig keys, with its formats (fmt:<FMT>), fp4_recipes, backends and seeds
where it lists them, and 05's optimizer variants (studies.variants.optimizer_runs); every point of each study file.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from altgrad_lib.choices import BLOCK_RECIPES, BLOCK_SWITCHES, NAMED_RECIPES, RECIPE_ALIASES  # noqa: E402
from altgrad_lib.errors import ConfigError  # noqa: E402
from altgrad_lib.studies.study import Study  # noqa: E402
from altgrad_lib.studies.variants import OPTIMIZER_VARIANTS, optimizer_runs  # noqa: E402
from altgrad_lib.training.config import KEY_ALIASES, TrainConfig  # noqa: E402
from altgrad_lib.training.run_dir import write_config_yaml  # noqa: E402

GOLDEN = ROOT / "tests" / "data" / "run_hashes.json"


def identity(cfg: TrainConfig, tmp: Path) -> list[str]:
    """[config hash, run name, sha256 of config.yaml as train() writes it]."""
    write_config_yaml(tmp, cfg.to_dict())
    return [cfg.config_hash(), cfg.auto_run_name(), hashlib.sha256(tmp.read_bytes()).hexdigest()]


def configs() -> dict[str, TrainConfig]:
    out: dict[str, TrainConfig] = {}
    fmts = sorted(p.stem for p in (ROOT / "params" / "01_formats").glob("*.yaml"))
    for r in (*NAMED_RECIPES, *RECIPE_ALIASES, *(f"fmt:{f}" for f in fmts)):
        with contextlib.suppress(ConfigError):   # a format no recipe can use (E8M0FNU: unsigned) is no run
            out[f"recipe {r}"] = TrainConfig(recipe=r)
    for b in BLOCK_RECIPES:
        for r in (b, *(f"{b}:{s.replace('<N>', '1')}" for s in BLOCK_SWITCHES.get(b, ()))):
            out[f"recipe {r}"] = TrainConfig(recipe=r)
    for v, (name, optim, lr_param) in OPTIMIZER_VARIANTS.items():
        out[f"variant {v}"] = TrainConfig(recipe="fmt:E4M3", optimizer=name,
                                          optim={**optim, **({"lr": 1.0} if lr_param else {})})
    for f in sorted((ROOT / "params").glob("[0-9]*/*.yaml")):
        label = str(f.relative_to(ROOT))
        d = yaml.safe_load(f.read_text()) or {}
        base = TrainConfig.from_dict({k: v for k, v in d.items() if k in TrainConfig.keys() or k in KEY_ALIASES})
        out[label] = base
        seeds = d.get("seeds") if isinstance(d.get("seeds"), list) else [base.seed]
        recipes = [f"fmt:{x}" for x in d.get("formats", [])] + list(d.get("fp4_recipes", []))
        if "variants" not in d:
            for r in recipes:
                for s in seeds:
                    out[f"{label} {r} s{s}"] = base.replace(recipe=r, seed=s)
        for b in d.get("backends", []):
            for s in seeds:
                out[f"{label} fp8_hybrid/{b} s{s}"] = base.replace(recipe="fp8_hybrid", backend=b, seed=s)
        if "variants" in d:
            runs, _ = optimizer_runs(d["formats"], d["variants"], d.get("pairs"),
                                     lrs={k: d[k] for k in ("grid_lr", "madam_lr") if k in d},
                                     stats_every=d.get("stats_every", 10), osc_window=d.get("osc_window"))
            for lab, ov in runs.items():
                for s in seeds:
                    out[f"{label} {lab} s{s}"] = base.replace(**ov, seed=s)
    for f in sorted((ROOT / "params" / "studies").glob("*.yaml")):
        for p in Study.from_yaml(f).expand():
            out[f"{f.relative_to(ROOT)} {p.name}"] = p.config.replace(run_name="")
    return out


def hashes(tmp_dir: Path) -> dict[str, list[str]]:
    return {label: identity(cfg, tmp_dir / "config.yaml") for label, cfg in configs().items()}


def main(argv: list[str]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        h = hashes(Path(d))
    text = json.dumps(h, indent=1, sort_keys=True) + "\n"
    if "--write" in argv:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text)
        print(f"wrote {len(h)} run identities to {GOLDEN.relative_to(ROOT)}")
    else:
        print(text, end="")


if __name__ == "__main__":
    main(sys.argv[1:])

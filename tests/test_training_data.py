"""Tests for altgrad_lib.training.data: corpora, licence family split, token cache, deterministic batches."""
from __future__ import annotations

import json
import math
import os
import re
import socket
from collections import Counter

import numpy as np
import pytest

from altgrad_lib.training import data as D


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="session")
def licenses():
    return D.load_corpus("licenses")


@pytest.fixture(scope="session")
def tc(tmp_path_factory):
    """The real licenses corpus under gpt2-4k, tokenized once per test session into a temp cache."""
    return D.TokenCorpus.build("licenses", "gpt2-4k", cache_dir=tmp_path_factory.mktemp("tok"), progress=False)


def _front_matter(name: str) -> dict:
    import yaml

    raw = (D.licenses_dir() / f"{name}.LICENSE").read_text(encoding="utf-8")
    return yaml.safe_load(raw.split("\n---", 1)[0].removeprefix("---"))


# ------------------------------------------------------------------------------------------------ corpora
@pytest.mark.parametrize("key,family", [
    ("gpl-2.0", "gpl"), ("gpl-3.0-plus", "gpl"), ("gpl-2.0-only", "gpl"), ("lgpl-2.1-or-later", "lgpl"),
    ("apache-2.0", "apache"), ("cc-by-sa-4.0", "cc-by-sa"), ("bsd-3-clause", "bsd"), ("mit", "mit"),
    ("artistic-1.0-perl", "artistic"), ("zlib", "zlib"), ("mpl-1.1", "mpl"),
])
def test_license_family(key, family):
    assert D.license_family(key) == family


def test_licenses_splits_and_sizes(licenses):
    assert set(licenses) == {"train", "validation"}
    n_tr, n_va = len(licenses["train"]), len(licenses["validation"])
    assert n_tr > 1500 and n_va > 20
    assert 0.02 < n_va / (n_tr + n_va) < 0.12  # ~5% by family hash
    stats = D.corpus_stats(licenses)
    assert stats["train"]["chars"] > 10_000_000 and stats["validation"]["chars"] > 100_000


def test_licenses_no_family_overlap(licenses):
    tr, va = set(list(licenses["train"]["family"])), set(list(licenses["validation"]["family"]))
    assert not tr & va
    # The families must be what license_family() says about each key (not, e.g., the key itself).
    for split in licenses.values():
        for k, f in zip(list(split["key"]), list(split["family"])):
            assert f == D.license_family(k)
    fam_of = dict(zip(list(licenses["train"]["key"]) + list(licenses["validation"]["key"]),
                      list(licenses["train"]["family"]) + list(licenses["validation"]["family"])))
    assert fam_of.get("gpl-2.0") == fam_of.get("gpl-3.0") == "gpl"


def test_licenses_no_duplicates_no_front_matter(licenses):
    texts = list(licenses["train"]["text"]) + list(licenses["validation"]["text"])
    norm = [" ".join(t.split()) for t in texts]
    assert len(set(norm)) == len(norm)
    assert min(map(len, norm)) >= D.MIN_CHARS
    fm_line = re.compile(r"^(key|short_name|spdx_license_key|category|owner|is_deprecated|language):", re.M)
    for t in texts:
        assert not re.match(r"---[ \t]*\n", t), t[:200]  # a lone '---' line opens front matter
        assert not fm_line.search(t[:2000]), t[:200]


def test_licenses_filters_language_and_deprecated(licenses):
    keys = set(list(licenses["train"]["key"]) + list(licenses["validation"]["key"]))
    non_en, deprecated = [], []
    for p in D.licenses_dir().glob("*.LICENSE"):
        head = p.read_text(encoding="utf-8")[:4000]
        if re.search(r"^language: (?!en\b)", head, re.M):
            non_en.append(p.stem)
        if re.search(r"^is_deprecated: yes", head, re.M):
            deprecated.append(p.stem)
    assert len(non_en) > 10 and len(deprecated) > 50  # the filters have something to do
    assert not keys & set(non_en)
    assert not keys & set(deprecated)
    assert _front_matter("gpl-2.0")["key"] == "gpl-2.0" and "gpl-2.0" in keys


def test_unknown_corpus_lists_valid_names():
    with pytest.raises(ValueError, match="licenses.*eurlex"):
        D.load_corpus("no-such-corpus-xyz")


def _forbid_network(monkeypatch):
    calls = []

    def boom(*a, **k):
        calls.append(a)
        raise OSError("network disabled in test")

    monkeypatch.setattr(socket, "create_connection", boom)
    monkeypatch.setattr(socket.socket, "connect", boom)
    return calls


def test_eurlex_offline_fails_at_once_naming_alternatives(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    calls = _forbid_network(monkeypatch)
    with pytest.raises(RuntimeError) as ei:
        D.load_corpus("eurlex")
    msg = str(ei.value)
    assert "'licenses'" in msg and "path" in msg
    assert calls == []  # offline: not even a connection attempt


def test_eurlex_altgrad_offline_alone_never_touches_network(monkeypatch):
    import datasets

    for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("ALTGRAD_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)  # as if imported without the HF flags
    calls = _forbid_network(monkeypatch)
    with pytest.raises(RuntimeError, match="licenses"):
        D.load_corpus("eurlex")
    assert calls == []


def test_eurlex_unreachable_hub_fails_at_once(monkeypatch):
    for v in ("ALTGRAD_OFFLINE", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(v, raising=False)
    calls = _forbid_network(monkeypatch)
    with pytest.raises(RuntimeError, match="unreachable") as ei:
        D.load_corpus("eurlex")
    assert "'licenses'" in str(ei.value)
    assert len(calls) == 1  # one quick probe, no retries


def test_local_text_file_and_dir(tmp_path):
    f = tmp_path / "one.txt"
    f.write_text("".join(f"line {i}\n" for i in range(100)))
    dd = D.load_corpus(str(f))
    assert list(dd["train"]["text"])[0] + list(dd["validation"]["text"])[0] == f.read_text()
    assert list(dd["validation"]["text"])[0] == "".join(f"line {i}\n" for i in range(95, 100))
    d = tmp_path / "docs"
    (d / "sub").mkdir(parents=True)
    for i in range(30):
        (d / ("sub" if i % 2 else "") / f"doc{i}.txt").write_text(f"document {i} " * 10)
    a, b = D.load_corpus(str(d)), D.load_corpus(str(d))
    assert list(a["validation"]["text"]) == list(b["validation"]["text"])  # deterministic
    assert len(a["validation"]) == 2 and len(a["train"]) == 28
    assert not set(list(a["train"]["text"])) & set(list(a["validation"]["text"]))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no .txt"):
        D.load_corpus(str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="unknown corpus"):
        D.load_corpus(str(tmp_path / "missing"))


def test_max_docs():
    dd = D.load_corpus("licenses", max_docs=7)
    assert len(dd["train"]) == 7 and len(dd["validation"]) == 7


# ------------------------------------------------------------------------------------------------ token cache
def test_token_corpus_contents(tc, licenses):
    assert tc.vocab_size == 4097 and tc.eot == 4096 and tc.tokenizer_name == "gpt2-4096"
    assert tc.train.dtype == np.uint16 and tc.val.dtype == np.uint16
    for arr, split in ((tc.train, "train"), (tc.val, "validation")):
        assert int(arr.max()) < tc.vocab_size
        assert int((arr == tc.eot).sum()) == len(licenses[split])  # one EOT after each document
    enc = D.get_tokenizer("gpt2-4k")
    first_eot = int(np.argmax(tc.train == tc.eot))
    assert enc.decode(tc.train[:first_eot].tolist()) == list(licenses["train"]["text"])[0]
    # decode(encode(text)) == text for the last validation document as well
    ends = np.flatnonzero(tc.val == tc.eot)
    assert enc.decode(tc.val[ends[-2] + 1:ends[-1]].tolist()) == list(licenses["validation"]["text"])[-1]


def test_summary_and_entropy(tc):
    s = tc.summary()
    for sp in ("train", "val"):
        for k in ("docs", "chars", "bytes", "tokens", "bytes_per_token", "unigram_entropy"):
            assert f"{sp}_{k}" in s
    assert s["train_tokens"] == len(tc.train) and s["val_tokens"] == len(tc.val)
    assert 2.0 < s["train_bytes_per_token"] < 5.0
    h = tc.unigram_entropy("train")
    assert 0 < h < math.log(tc.vocab_size)
    # Independent oracle: plain Counter over a (smaller) split.
    cnt = Counter(tc.val.tolist())
    n = sum(cnt.values())
    ref = -sum(c / n * math.log(c / n) for c in cnt.values())
    assert tc.unigram_entropy("validation") == pytest.approx(ref, rel=1e-9)


def test_batches_deterministic_and_shifted(tc):
    x, y = tc.get_batch("train", 8, 32, seed=1, step=3)
    assert x.shape == y.shape == (8, 32) and str(x.dtype) == "torch.int64"
    assert (x[:, 1:] == y[:, :-1]).all()
    # each row is a contiguous window of the token stream
    row = x[0].numpy()
    cand = np.flatnonzero(np.asarray(tc.train[: len(tc.train) - 32]) == row[0])
    starts = [i for i in cand if (tc.train[i:i + 32] == row).all()]
    assert starts and any(tc.train[i + 32] == y[0, -1].item() for i in starts)
    # same (seed, split, step) -> same batch, regardless of what was drawn in between
    tc.get_batch("train", 8, 32, seed=1, step=4)
    x2, y2 = tc.get_batch("train", 8, 32, seed=1, step=3)
    assert (x2 == x).all() and (y2 == y).all()
    assert not (tc.get_batch("train", 8, 32, seed=1, step=4)[0] == x).all()
    assert not (tc.get_batch("train", 8, 32, seed=2, step=3)[0] == x).all()
    xv, _ = tc.get_batch("val", 8, 32, seed=1, step=3)
    xv2, _ = tc.get_batch("validation", 8, 32, seed=1, step=3)
    assert (xv == xv2).all() and int(xv.max()) < tc.vocab_size
    with pytest.raises(ValueError, match="split"):
        tc.get_batch("test", 2, 8, seed=0, step=0)
    ev1 = [x for x, _ in tc.eval_batches("val", 3, 4, 16, seed=0)]
    ev2 = [x for x, _ in tc.eval_batches("val", 3, 4, 16, seed=0)]
    assert all((a == b).all() for a, b in zip(ev1, ev2)) and not (ev1[0] == ev1[1]).all()
    assert "train=" not in repr(tc)  # memmaps kept out of the repr


def test_cache_reuse_and_corruption(tmp_path):
    def build():
        return D.TokenCorpus.build("licenses", "gpt2-2k", cache_dir=tmp_path, max_docs=40, progress=False)

    a = build()
    assert not a.from_cache
    train_bin = a.cache_dir / "train.bin"
    mtime = train_bin.stat().st_mtime_ns
    b = build()
    assert b.from_cache and train_bin.stat().st_mtime_ns == mtime  # no re-tokenization
    assert (np.asarray(b.train) == np.asarray(a.train)).all()
    assert D.TokenCorpus.build("licenses", "gpt2-2048", cache_dir=tmp_path, max_docs=40,
                               progress=False).from_cache  # alias shares the cache
    good = np.array(a.train)
    meta = json.loads((a.cache_dir / "meta.json").read_text())
    assert meta["splits"]["train"]["tokens"] == len(good)
    del a, b
    # 1) truncated file (half-written)  2) same size, flipped byte  3) missing meta.json (crash before commit)
    with open(train_bin, "r+b") as f:
        f.truncate(train_bin.stat().st_size // 2)
    c = build()
    assert not c.from_cache and (np.asarray(c.train) == good).all()
    del c
    with open(train_bin, "r+b") as f:
        f.seek(10)
        byte = f.read(1)
        f.seek(10)
        f.write(bytes([byte[0] ^ 0xFF]))
    d = build()
    assert not d.from_cache and (np.asarray(d.train) == good).all()
    del d
    os.remove(train_bin.parent / "meta.json")
    e = build()
    assert not e.from_cache and (np.asarray(e.train) == good).all()
    assert not list(train_bin.parent.glob(".*.tmp*"))  # no temp files left behind


def test_local_text_token_corpus(tmp_path):
    f = tmp_path / "tiny.txt"
    f.write_text("The quick brown fox jumps over the lazy dog.\n" * 200)
    t = D.TokenCorpus.build(str(f), "gpt2-4k", cache_dir=tmp_path / "c", progress=False)
    assert t.cache_dir.name.startswith("tiny.txt-gpt2-4096-")
    x, y = t.get_batch("train", 2, 16, seed=0, step=0)
    assert x.shape == (2, 16) and (x[:, 1:] == y[:, :-1]).all()


def test_unigram_entropy_against_a_hand_count():
    # tokens 7, 7, 7, 3 -> p = (3/4, 1/4): H = -(0.75 ln 0.75 + 0.25 ln 0.25) = 0.5623351446188083 nats
    assert D.unigram_entropy(np.array([7, 3, 7, 7])) == pytest.approx(0.5623351446188083, rel=1e-12)
    assert D.unigram_entropy(np.array([5, 5])) == 0.0


def test_eval_unigram_entropy_is_the_val_split_entropy():
    h = D.eval_unigram_entropy("licenses", "gpt2-512", max_docs=50)
    val = D.TokenCorpus.build("licenses", "gpt2-512", max_docs=50, progress=False).val
    cnt = Counter(val.tolist())
    n = sum(cnt.values())
    assert h == pytest.approx(-sum(c / n * math.log(c / n) for c in cnt.values()), rel=1e-9)


def test_the_licences_content_hash_is_remembered_and_forgotten_when_a_file_changes(tmp_path, monkeypatch):
    """A second build of the licences corpus finds its token cache without parsing the 2,300 licence files (what
    every study worker and notebook kernel paid, ~1.7 s): same cache directory, same tokens, same content hash as the
    full path, which the oracle here is (the cache built by parsing them). Editing a licence file (its size or mtime)
    sends the next build through the full path again."""
    import shutil

    src = tmp_path / "licenses"
    shutil.copytree(D.licenses_dir(), src)
    monkeypatch.setattr(D, "licenses_dir", lambda: src)
    D._load_licenses.cache_clear()

    def build():
        return D.TokenCorpus.build("licenses", "gpt2-2k", cache_dir=tmp_path / "tok", max_docs=40, progress=False)

    a = build()
    assert not a.from_cache
    real = D.load_corpus
    monkeypatch.setattr(D, "load_corpus", lambda *a, **k: pytest.fail("parsed the licence files again"))
    b = build()
    assert b.from_cache and b.cache_dir == a.cache_dir and b.meta == a.meta
    assert (np.asarray(b.train) == np.asarray(a.train)).all() and (np.asarray(b.val) == np.asarray(a.val)).all()
    calls = []
    monkeypatch.setattr(D, "load_corpus", lambda *a, **k: calls.append(1) or real(*a, **k))
    first = sorted(src.glob("*.LICENSE"))[0]
    first.write_text(first.read_text() + "\n")
    D._load_licenses.cache_clear()
    build()
    assert calls == [1]                          # a changed file: parsed and hashed again
    D._load_licenses.cache_clear()

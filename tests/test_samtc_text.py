"""Tests of the SAMTC text loaders and multi-task sets (tandem.inference.datasets.text)."""
from collections import Counter

import numpy as np
import pytest
import scipy.sparse as sp

from common import DATA_DIR
from tandem.inference.datasets import text as tx
from tandem.inference.datasets.text import load_set

needs = lambda rel: pytest.mark.skipif(not (DATA_DIR / rel).exists(),  # noqa: E731
                                       reason=f"data file {rel} not present")


def test_tfidf_hand_values():
    X, vocab = tx.tfidf(["apple banana apple", "banana cherry", "cherry durian durian durian"],
                        min_df=1, max_df=1.0, max_features=None)
    assert vocab == ["apple", "banana", "cherry", "durian"]
    assert sp.issparse(X) and X.shape == (3, 4)
    # doc 0: apple tf 2 → (1+log 2)·log(3/1); banana tf 1 → 1·log(3/2)
    a, b = (1 + np.log(2)) * np.log(3), np.log(1.5)
    row = X[0].toarray().ravel()
    np.testing.assert_allclose(row, np.array([a, b, 0, 0]) / np.hypot(a, b))
    np.testing.assert_allclose(np.sqrt(X.multiply(X).sum(1)).A.ravel(), 1.0)
    assert (X.data > 0).all()


def test_tokenize_drops_stop_words_and_short_tokens():
    assert tx.tokenize("The Cat sat on a MAT, 42 times; it's ok") == ["cat", "sat", "mat", "times"]


def test_missing_data_names_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="reuters21578_raw_sgml.tar.gz"):
        tx.load_reuters(tmp_path)
    with pytest.raises(FileNotFoundError, match="cornell.content"):
        tx.load_webkb_linqs(tmp_path)
    with pytest.raises(FileNotFoundError, match="20news-bydate_raw_18846docs.tar.gz"):
        tx.load_set("NG-p1", data_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown multi-task set"):
        tx.load_set("NG-p9", data_dir=tmp_path)


@needs("webkb/linqs/cornell.content")
def test_webkb_linqs_counts():
    d = tx.load_webkb_linqs()
    assert {u: d[u][0].shape[0] for u in tx.UNIVERSITIES} == {
        "cornell": 195, "texas": 187, "washington": 230, "wisconsin": 265}
    assert all(X.shape[1] == 1703 and set(np.unique(X.data)) == {1.0} for X, _, _ in d.values())
    assert set(np.concatenate([y for _, y, _ in d.values()])) == {"course", "faculty", "student", "project", "staff"}


@needs(tx.REUTERS_RAW)
def test_reuters_single_topic_set():
    c = tx.load_reuters()
    assert len(c.texts) == 8293
    cnt = Counter(c.labels)
    assert len(cnt) == 65
    assert (c.groups == "TRAIN").sum() == 5946 and (c.groups == "TEST").sum() == 2347
    assert cnt["earn"] == 3713 and cnt["acq"] == 2055 and cnt["crude"] == 321


@needs(tx.WEBKB_RAW)
def test_webkb_raw_four_universities():
    c = tx.load_webkb_raw()
    w4 = np.isin(c.labels, ["course", "faculty", "project", "student"])
    assert w4.sum() == 1041          # the usual WebKB4 pages of the four universities
    assert set(c.groups) == set(tx.UNIVERSITIES)
    assert not any("<html" in t.lower() for t in c.texts[:200])


@needs(tx.NEWS_RAW)
def test_20news_corpus():
    c = tx.load_20news()
    assert len(c.texts) == 18846 and len(set(c.labels)) == 20
    assert (c.groups == "train").sum() == 11314 and (c.groups == "test").sum() == 7532


EXPECTED = {  # documented construction: (classes per task, documents per task)
    "WebKB-c": ([4, 4, 4, 4], [226, 252, 255, 308]),
    "WebKB-p1": ([3, 3, 3, 3], [206, 206, 178, 152]),
    "WebKB-p2": ([4, 3, 2, 3], [226, 232, 203, 79]),
    "NG-p1": ([4, 4, 4], [600, 600, 600]),
    "NG-p2": ([4, 3, 2], [600, 450, 300]),
    "Reuters-p1": ([3, 3, 3], [450, 450, 442]),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_multitask_sets_as_documented(name):
    corpus_file = {"webkb": tx.WEBKB_RAW, "20news": tx.NEWS_RAW, "reuters": tx.REUTERS_RAW}[tx.SETS[name]["corpus"]]
    if not (DATA_DIR / corpus_file).exists():
        pytest.skip(f"{corpus_file} not present")
    ds = tx.load_set(name)
    h, n = EXPECTED[name]
    assert ds.n_clusters == h and [X.shape[0] for X in ds.tasks] == n
    assert len({X.shape[1] for X in ds.tasks}) == 1                 # one common vocabulary
    for X, y, cls in zip(ds.tasks, ds.labels, ds.class_names):
        assert sp.issparse(X)
        assert set(np.unique(y)) == set(range(len(cls)))
        norms = np.sqrt(X.multiply(X).sum(1)).A.ravel()
        assert np.all((np.abs(norms - 1) < 1e-9) | (norms == 0))
    idx = np.concatenate(ds.doc_index)
    assert len(np.unique(idx)) == len(idx)                           # tasks never share a document
    # the same set twice is identical (fixed data seed)
    again = tx.load_set(name)
    assert all((a != b).nnz == 0 for a, b in zip(ds.tasks, again.tasks))


@pytest.mark.parametrize("kw,match", [({"per_class": -5}, "per_class"), ({"per_class": 0}, "per_class"),
                                      ({"per_class": 2.5}, "per_class"), ({"max_features": 0}, "max_features")])
def test_load_set_rejects_bad_sizes_before_reading_data(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        load_set("Reuters-p1", data_dir=tmp_path, **kw)    # no data there: the check comes first

"""Text corpora and the six multi-task clustering sets of SAMTC (Zhang et al., IJCAI 2016).

Corpora (read from ``../shared/data``, never copied into the project; see its README):

* WebKB — raw CMU "4 Universities" pages (``webkb/webkb_4universities_raw_8281pages.tar.gz``,
  pages of cornell, texas, washington, wisconsin; HTTP header and HTML tags stripped) and
  the LINQS 877-page binary word-indicator files (``webkb/linqs/<university>.content``).
* 20 Newsgroups — ``20news/20news-bydate_raw_18846docs.tar.gz`` (18846 messages; the
  header block is dropped except its Subject line).
* Reuters-21578 — ``reuters/reuters21578_raw_sgml.tar.gz``: documents with TOPICS="YES",
  LEWISSPLIT in {TRAIN, TEST}, exactly one topic and a non-empty body → 8293 documents,
  65 classes (5946 train / 2347 test).

Parsed corpora are cached (tandem's safe format, keyed on the archive's SHA-256) under
``$TANDEM_CACHE`` or ``~/.cache/tandem``.

Term-document matrices: own tokeniser and tf-idf on scipy.sparse (no scikit-learn):
lower-case alphabetic tokens of 3–20 letters, a fixed English stop list, vocabulary of
one multi-task set built over *all* its tasks (one common feature space) keeping terms
with document frequency ≥ ``min_df`` and ≤ ``max_df``·N, the ``max_features`` most
frequent; weight (1 + log tf)·log(N/df); rows L2-normalised (empty rows stay 0).

Multi-task sets (:data:`SETS`; tasks are disjoint document sets; a "class" shared by
two tasks has the same name in both — in 20NG a class is a top-level category whose
sub-group differs between tasks, so shared classes are related but shifted):

===========  ==========  =================================================================
set          h_t         tasks (classes)
===========  ==========  =================================================================
WebKB-c      4,4,4,4     cornell, texas, washington, wisconsin: course, faculty, project,
                         student (completely related)
WebKB-p1     3,3,3,3     cornell: course, faculty, student | texas: course, project,
                         student | washington: faculty, project, student | wisconsin:
                         course, faculty, project (each university drops a different class)
WebKB-p2     4,3,2,3     cornell: course, faculty, project, student | texas: course,
                         faculty, student | washington: course, student | wisconsin:
                         faculty, project, staff
NG-p1        4,4,4       T1: comp=comp.graphics, rec=rec.autos, sci=sci.crypt,
                         talk=talk.politics.guns | T2: comp=comp.os.ms-windows.misc,
                         rec=rec.motorcycles, sci=sci.electronics,
                         religion=soc.religion.christian | T3: comp=comp.sys.ibm.pc.hardware,
                         rec=rec.sport.baseball, talk=talk.politics.mideast,
                         forsale=misc.forsale
NG-p2        4,3,2       T1: comp=comp.sys.mac.hardware, rec=rec.sport.hockey, sci=sci.med,
                         talk=talk.politics.misc | T2: comp=comp.windows.x, sci=sci.space,
                         religion=talk.religion.misc | T3: rec=rec.sport.baseball,
                         religion=alt.atheism
Reuters-p1   3,3,3       T1: earn, acq, crude | T2: earn, trade, money-fx | T3: acq,
                         interest, ship
===========  ==========  =================================================================

Sizes: WebKB sets keep every page of the chosen classes (≈ 60–310 pages per task);
20NG uses 150 documents per class and task; Reuters 150 per class and task (ship has
fewer: all are used), drawn without replacement with a fixed data seed so tasks never
share a document (a class used by several tasks is split between them).
"""
from __future__ import annotations

import gzip
import hashlib
import html
import os
import re
import tarfile
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from tandem.inference.datasets import data_dir as resolve_data_dir
from tandem.inference.persistence import PersistenceError, dump, load
from tandem.inference.validation import check_int_range, check_real_range, require_file

__all__ = ["Corpus", "MultiTaskSet", "load_webkb_raw", "load_webkb_linqs", "load_20news",
           "load_reuters", "tfidf", "tokenize", "SETS", "load_set", "UNIVERSITIES"]

UNIVERSITIES = ("cornell", "texas", "washington", "wisconsin")
WEBKB_RAW = "webkb/webkb_4universities_raw_8281pages.tar.gz"
NEWS_RAW = "20news/20news-bydate_raw_18846docs.tar.gz"
REUTERS_RAW = "reuters/reuters21578_raw_sgml.tar.gz"
_HINT = "See ../shared/data/README.md for where to get the file."
_CACHE_VERSION = 1

STOP_WORDS = frozenset("""
a about above after again against all also am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further had
has have having he her here hers herself him himself his how i if in into is it its itself just
me more most my myself no nor not now of off on once only or other our ours ourselves out over
own same she should so some such than that the their theirs them themselves then there these
they this those through to too under until up very was we were what when where which while who
whom why will with would you your yours yourself yourselves edu com www http html htm subject
re writes wrote article one two may might must also get got use used using like well much many
said say says new time per lines organization date mime version content type text server
last modified length gmt reuter
""".split())


@dataclass
class Corpus:
    """A parsed corpus: texts, class names and a group (university / split) per document.

    Attributes
    ----------
    texts : list of str
        The N documents' texts.
    labels : numpy.ndarray
        (N,) str class names.
    groups : numpy.ndarray
        (N,) str: university (WebKB) or split (20NG, Reuters).
    ids : list of str
        Per document, its identifier in the source archive.
    """
    texts: list
    labels: np.ndarray   # (N,) str class names
    groups: np.ndarray   # (N,) str: university (WebKB) or split (20NG, Reuters)
    ids: list


@dataclass
class MultiTaskSet:
    """One multi-task clustering set: per task a tf-idf matrix, labels and class names.

    Attributes
    ----------
    name : str
        The set's name (a key of :data:`SETS`).
    tasks : list of scipy.sparse.csr_matrix
        Per task t, the (n_t, V) tf-idf matrix, rows L2-normalised.
    labels : list of numpy.ndarray
        Per task, the (n_t,) int labels 0..h_t−1.
    class_names : list of list of str
        ``class_names[t][c]``, the name of class c of task t.
    task_names : list of str
        The tasks' names.
    vocabulary : list of str
        The V terms, one per column.
    doc_index : list of numpy.ndarray, default None
        Per task, the indices of its documents in the parsed corpus.
    """
    name: str
    tasks: list          # list of (n_t, V) scipy.sparse csr, rows L2-normalised
    labels: list         # list of (n_t,) int arrays, 0..h_t−1
    class_names: list    # list of lists: class_names[t][c]
    task_names: list
    vocabulary: list
    doc_index: list = None  # per task, indices of its documents in the parsed corpus

    @property
    def n_clusters(self):
        return [len(c) for c in self.class_names]


# ---------------------------------------------------------------------------------
# caching
# ---------------------------------------------------------------------------------

def _cache_dir() -> Path:
    return Path(os.environ.get("TANDEM_CACHE", Path.home() / ".cache" / "tandem"))


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _cached(name: str, source: Path, build):
    """Return build() from a cache keyed by name + the SHA-256 of the source file's contents.

    The cache is tandem's safe format (:mod:`tandem.inference.persistence`: nothing is
    unpickled), written atomically; an unreadable cache file is rebuilt. A damaged source
    archive (truncated gzip, not a tar file, malformed documents) raises ``ValueError``
    naming it; so does an archive without a single document of the expected layout."""
    key = f"{name}-v{_CACHE_VERSION}-{_file_sha256(source)[:24]}.pt"
    kind = f"corpus:{name}/{_CACHE_VERSION}"
    path = _cache_dir() / key
    if path.exists():
        try:
            obj = load(path, kind)
            if isinstance(obj, Corpus):
                return obj
        except (PersistenceError, OSError):  # corrupt or foreign cache: rebuild
            pass
    try:
        obj = build()
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, OSError, AttributeError,
            UnicodeDecodeError) as err:
        raise ValueError(f"{source}: cannot read the archive ({type(err).__name__}: {err}); the file is "
                         f"damaged or truncated: download it again ({_HINT})") from None
    if not obj.texts:
        raise ValueError(f"{source}: the archive holds no documents of the expected layout; it is not the "
                         f"expected archive or it is damaged: download it again ({_HINT})")
    try:
        dump(obj, path, kind)
    except OSError:
        pass
    return obj


def _data_dir(data_dir):
    return resolve_data_dir(data_dir)


# ---------------------------------------------------------------------------------
# parsers
# ---------------------------------------------------------------------------------

_TAG = re.compile(r"<[^>]*>", re.S)
_SCRIPT = re.compile(r"<(script|style)[^>]*>.*?</\1>", re.S | re.I)


def _strip_html(raw: str) -> str:
    # drop the HTTP header (everything up to the first blank line) when present
    m = re.search(r"\r?\n\r?\n", raw)
    if raw.lstrip().lower().startswith(("mime-version", "http/", "date:", "server:")) and m:
        raw = raw[m.end():]
    raw = _SCRIPT.sub(" ", raw)
    raw = _TAG.sub(" ", raw)
    return html.unescape(raw)


def load_webkb_raw(data_dir=None, universities=UNIVERSITIES) -> Corpus:
    """Raw WebKB pages of the given universities (all 7 classes), HTML stripped.

    Parameters
    ----------
    data_dir : str or os.PathLike, optional
        The data folder (default :func:`tandem.inference.datasets.data_dir`).
    universities : sequence of str, default UNIVERSITIES
        The universities kept (cornell, texas, washington, wisconsin).

    Returns
    -------
    Corpus
        Groups are the universities.

    Raises
    ------
    FileNotFoundError
        If the archive is missing.
    ValueError
        If the archive is damaged or holds no document of the expected layout.
    """
    path = require_file(_data_dir(data_dir) / WEBKB_RAW, "WebKB raw archive", _HINT)

    def build():
        texts, labels, groups, ids = [], [], [], []
        with tarfile.open(path, "r:gz") as tf:
            for m in tf:
                parts = m.name.split("/")
                if not m.isfile() or len(parts) < 5:
                    continue
                cls, uni = parts[-3], parts[-2]
                raw = tf.extractfile(m).read().decode("latin-1")
                texts.append(_strip_html(raw))
                labels.append(cls)
                groups.append(uni)
                ids.append(parts[-1])
        return Corpus(texts, np.array(labels), np.array(groups), ids)

    c = _cached("webkb_raw", path, build)
    keep = np.isin(c.groups, list(universities))
    idx = np.flatnonzero(keep)
    return Corpus([c.texts[i] for i in idx], c.labels[idx], c.groups[idx], [c.ids[i] for i in idx])


def load_webkb_linqs(data_dir=None, universities=UNIVERSITIES):
    """The LINQS 877-page WebKB files (binary word indicators).

    Parameters
    ----------
    data_dir : str or os.PathLike, optional
        The data folder (default :func:`tandem.inference.datasets.data_dir`).
    universities : sequence of str, default UNIVERSITIES
        The universities read (one ``webkb/linqs/<university>.content`` file each).

    Returns
    -------
    dict
        {university: (X (n, 1703) csr binary, labels (n,) str, urls)}.

    Raises
    ------
    FileNotFoundError
        If a file is missing.
    ValueError
        If a file is not text, is empty or has a malformed line.
    """
    out = {}
    for u in universities:
        path = require_file(_data_dir(data_dir) / "webkb" / "linqs" / f"{u}.content",
                            f"WebKB LINQS file for {u}", _HINT)
        rows, labels, urls = [], [], []
        try:
            text = path.read_text()
        except UnicodeDecodeError as err:
            raise ValueError(f"{path}: not a text file ({err}); the LINQS .content file is damaged") from None
        for lineno, line in enumerate(text.splitlines(), start=1):
            f = line.split()
            if not f:
                continue
            if len(f) < 3:
                raise ValueError(f"{path}, line {lineno}: expected '<url> <word flags...> <label>', got "
                                 f"{len(f)} field(s); the LINQS .content file is damaged")
            try:
                row = np.array(f[1:-1], dtype=np.float64)
            except ValueError:
                raise ValueError(f"{path}, line {lineno}: the word flags are not numbers; the LINQS .content "
                                 "file is damaged") from None
            if rows and row.size != rows[0].size:
                raise ValueError(f"{path}, line {lineno}: {row.size} word flags, but line 1 has {rows[0].size}; "
                                 "the LINQS .content file is damaged")
            if not np.all(np.isfinite(row)):
                raise ValueError(f"{path}, line {lineno}: non-finite word flags; the LINQS .content file is damaged")
            urls.append(f[0])
            labels.append(f[-1])
            rows.append(row)
        if not rows:
            raise ValueError(f"{path}: no documents; the LINQS .content file is empty or damaged")
        out[u] = (sp.csr_matrix(np.vstack(rows)), np.array(labels), urls)
    return out


def _strip_news_header(raw: str) -> str:
    head, sep, body = raw.partition("\n\n")
    if not sep:
        return raw
    subj = [ln[8:] for ln in head.splitlines() if ln.lower().startswith("subject:")]
    return " ".join(subj) + "\n" + body


def load_20news(data_dir=None) -> Corpus:
    """20 Newsgroups by-date, 18846 messages; groups = "train"/"test".

    Parameters
    ----------
    data_dir : str or os.PathLike, optional
        The data folder (default :func:`tandem.inference.datasets.data_dir`).

    Returns
    -------
    Corpus
        The messages, the header dropped except its Subject line.

    Raises
    ------
    FileNotFoundError
        If the archive is missing.
    ValueError
        If the archive is damaged or holds no document of the expected layout.
    """
    path = require_file(_data_dir(data_dir) / NEWS_RAW, "20 Newsgroups raw archive", _HINT)

    def build():
        texts, labels, groups, ids = [], [], [], []
        with tarfile.open(path, "r:gz") as tf:
            for m in tf:
                parts = m.name.split("/")
                if not m.isfile() or len(parts) < 3 or not parts[-3].startswith("20news-bydate-"):
                    continue
                raw = tf.extractfile(m).read().decode("latin-1")
                texts.append(_strip_news_header(raw))
                labels.append(parts[-2])
                groups.append(parts[-3].rsplit("-", 1)[1])
                ids.append(parts[-1])
        return Corpus(texts, np.array(labels), np.array(groups), ids)

    return _cached("20news", path, build)


_REUTERS_DOC = re.compile(r"<REUTERS([^>]*)>(.*?)</REUTERS>", re.S)


def load_reuters(data_dir=None) -> Corpus:
    """Reuters-21578 single-topic set: 8293 documents, 65 topics, groups TRAIN/TEST.

    Kept: TOPICS="YES", LEWISSPLIT ∈ {TRAIN, TEST}, exactly one <D> in <TOPICS>, a
    non-empty <BODY>. Text = title + body.

    Parameters
    ----------
    data_dir : str or os.PathLike, optional
        The data folder (default :func:`tandem.inference.datasets.data_dir`).

    Returns
    -------
    Corpus
        Labels are the topics, groups the split (TRAIN/TEST).

    Raises
    ------
    FileNotFoundError
        If the archive is missing.
    ValueError
        If the archive is damaged or holds no document of the expected layout.
    """
    path = require_file(_data_dir(data_dir) / REUTERS_RAW, "Reuters-21578 SGML archive", _HINT)

    def build():
        texts, labels, groups, ids = [], [], [], []
        with tarfile.open(path, "r:gz") as tf:
            names = sorted(m.name for m in tf if m.name.endswith(".sgm"))
            for name in names:
                raw = tf.extractfile(name).read().decode("latin-1")
                for attrs, body in _REUTERS_DOC.findall(raw):
                    if 'TOPICS="YES"' not in attrs:
                        continue
                    split = re.search(r'LEWISSPLIT="([^"]+)"', attrs).group(1)
                    if split not in ("TRAIN", "TEST"):
                        continue
                    tm = re.search(r"<TOPICS>(.*?)</TOPICS>", body, re.S)
                    topics = re.findall(r"<D>(.*?)</D>", tm.group(1)) if tm else []
                    bm = re.search(r"<BODY>(.*?)</BODY>", body, re.S)
                    if len(topics) != 1 or not bm or not bm.group(1).strip():
                        continue
                    ti = re.search(r"<TITLE>(.*?)</TITLE>", body, re.S)
                    text = (ti.group(1) if ti else "") + "\n" + bm.group(1)
                    texts.append(html.unescape(text))
                    labels.append(topics[0])
                    groups.append(split)
                    ids.append(re.search(r'NEWID="(\d+)"', attrs).group(1))
        return Corpus(texts, np.array(labels), np.array(groups), ids)

    return _cached("reuters", path, build)


# ---------------------------------------------------------------------------------
# tf-idf
# ---------------------------------------------------------------------------------

_TOKEN = re.compile(r"[a-z]{3,20}")


def tokenize(text: str) -> list:
    """Lower-case alphabetic tokens of 3–20 letters, stop words removed.

    Parameters
    ----------
    text : str
        A document.

    Returns
    -------
    list of str
        Its tokens in order.
    """
    return [w for w in _TOKEN.findall(text.lower()) if w not in STOP_WORDS]


def tfidf(texts, min_df: int = 3, max_df: float = 0.5, max_features: int | None = 5000,
          vocabulary=None):
    """tf-idf matrix (N × V csr), rows L2-normalised, and the vocabulary.

    weight(d, w) = (1 + log tf_dw) · log(N / df_w); vocabulary = terms with
    min_df ≤ df ≤ max_df·N, the ``max_features`` of highest df (ties alphabetical),
    sorted alphabetically — or the given ``vocabulary``.

    Parameters
    ----------
    texts : sequence of str
        The N documents.
    min_df : int, default 3
        Minimum document frequency of a term.
    max_df : float, default 0.5
        Maximum document frequency, as a fraction of N, in (0, 1].
    max_features : int or None, default 5000
        Keep at most this many terms (highest df); None keeps all.
    vocabulary : list of str, optional
        A fixed vocabulary (the df filters are then not applied).

    Returns
    -------
    tuple
        ``(X, vocabulary)``: X the (N, V) scipy.sparse csr matrix, and the V terms.

    Raises
    ------
    ValueError
        Naming ``max_df`` when it is not a finite real in (0, 1] (NaN or a value ≤ 0 would keep no term).
    """
    check_real_range(max_df, "max_df", 0.0, 1.0, low_open=True)
    docs = [Counter(tokenize(t)) for t in texts]
    N = len(docs)
    if vocabulary is None:
        df = Counter()
        for c in docs:
            df.update(c.keys())
        terms = [w for w, f in df.items() if f >= min_df and f <= max_df * N]
        terms.sort(key=lambda w: (-df[w], w))
        if max_features is not None:
            terms = terms[:max_features]
        vocabulary = sorted(terms)
    index = {w: i for i, w in enumerate(vocabulary)}
    rows, cols, vals = [], [], []
    for r, c in enumerate(docs):
        for w, f in c.items():
            j = index.get(w)
            if j is not None:
                rows.append(r)
                cols.append(j)
                vals.append(1.0 + np.log(f))
    X = sp.csr_matrix((vals, (rows, cols)), shape=(N, len(vocabulary)))
    df = np.bincount(X.indices, minlength=len(vocabulary)).astype(np.float64)
    idf = np.log(N / np.maximum(df, 1.0))
    X = X @ sp.diags(idf)
    nrm = np.sqrt(np.asarray(X.multiply(X).sum(1)).ravel())
    X = sp.diags(1.0 / np.where(nrm > 0, nrm, 1.0)) @ X
    return sp.csr_matrix(X), vocabulary


# ---------------------------------------------------------------------------------
# the six multi-task sets
# ---------------------------------------------------------------------------------

_W4 = ["course", "faculty", "project", "student"]
SETS = {
    "WebKB-c": {"corpus": "webkb", "tasks": [(u, {c: c for c in _W4}) for u in UNIVERSITIES]},
    "WebKB-p1": {"corpus": "webkb", "tasks": [
        ("cornell", {c: c for c in ["course", "faculty", "student"]}),
        ("texas", {c: c for c in ["course", "project", "student"]}),
        ("washington", {c: c for c in ["faculty", "project", "student"]}),
        ("wisconsin", {c: c for c in ["course", "faculty", "project"]})]},
    "WebKB-p2": {"corpus": "webkb", "tasks": [
        ("cornell", {c: c for c in _W4}),
        ("texas", {c: c for c in ["course", "faculty", "student"]}),
        ("washington", {c: c for c in ["course", "student"]}),
        ("wisconsin", {c: c for c in ["faculty", "project", "staff"]})]},
    "NG-p1": {"corpus": "20news", "per_class": 150, "tasks": [
        ("T1", {"comp": "comp.graphics", "rec": "rec.autos", "sci": "sci.crypt",
                "talk": "talk.politics.guns"}),
        ("T2", {"comp": "comp.os.ms-windows.misc", "rec": "rec.motorcycles",
                "sci": "sci.electronics", "religion": "soc.religion.christian"}),
        ("T3", {"comp": "comp.sys.ibm.pc.hardware", "rec": "rec.sport.baseball",
                "talk": "talk.politics.mideast", "forsale": "misc.forsale"})]},
    "NG-p2": {"corpus": "20news", "per_class": 150, "tasks": [
        ("T1", {"comp": "comp.sys.mac.hardware", "rec": "rec.sport.hockey", "sci": "sci.med",
                "talk": "talk.politics.misc"}),
        ("T2", {"comp": "comp.windows.x", "sci": "sci.space", "religion": "talk.religion.misc"}),
        ("T3", {"rec": "rec.sport.baseball", "religion": "alt.atheism"})]},
    "Reuters-p1": {"corpus": "reuters", "per_class": 150, "tasks": [
        ("T1", {c: c for c in ["earn", "acq", "crude"]}),
        ("T2", {c: c for c in ["earn", "trade", "money-fx"]}),
        ("T3", {c: c for c in ["acq", "interest", "ship"]})]},
}


def load_set(name: str, data_dir=None, data_seed: int = 0, per_class: int | None = None,
             max_features: int = 5000) -> MultiTaskSet:
    """Build one of the six multi-task sets (see the module docstring for its classes).

    per_class overrides the set's cap on documents per class and task (None → the set's
    default; WebKB has no cap). Documents are drawn without replacement with
    ``data_seed``; a source class used by several tasks is split among them (disjoint).

    Parameters
    ----------
    name : str
        One of the keys of :data:`SETS` (WebKB-c, WebKB-p1, WebKB-p2, NG-p1, NG-p2, Reuters-p1).
    data_dir : str or os.PathLike, optional
        The data folder (default :func:`tandem.inference.datasets.data_dir`).
    data_seed : int, default 0
        Seed of the document draw (≥ 0).
    per_class : int or None, default None
        Cap on documents per class and task (≥ 1); None: the set's default.
    max_features : int, default 5000
        Vocabulary size cap of :func:`tfidf` (≥ 1).

    Returns
    -------
    MultiTaskSet
        The tasks' tf-idf matrices (one common vocabulary), labels and class names.

    Raises
    ------
    ValueError
        If ``name`` is unknown, an integer argument is out of range, a class has no documents
        left, or a corpus archive is damaged.
    FileNotFoundError
        If the corpus archive is missing.
    """
    if name not in SETS:
        raise ValueError(f"unknown multi-task set {name!r}; expected one of {sorted(SETS)}")
    if per_class is not None:
        check_int_range(per_class, "per_class (documents per class and task)", 1)
    check_int_range(max_features, "max_features", 1)
    check_int_range(data_seed, "data_seed", 0)
    spec = SETS[name]
    cap = spec.get("per_class") if per_class is None else per_class
    corpus = {"webkb": load_webkb_raw, "20news": load_20news, "reuters": load_reuters}[spec["corpus"]](data_dir)
    rng = np.random.default_rng(data_seed)
    # pools of document indices per (group restriction, source class), consumed in task order
    pools = {}
    chosen, labels, names = [], [], []
    for task, classes in spec["tasks"]:
        idx_t, lab_t = [], []
        for c, (cname, src) in enumerate(classes.items()):
            key = (task if spec["corpus"] == "webkb" else None, src)
            if key not in pools:
                m = corpus.labels == src
                if spec["corpus"] == "webkb":
                    m &= corpus.groups == task
                pool = np.flatnonzero(m)
                pools[key] = list(rng.permutation(pool))
            pool = pools[key]
            # leave a fair share of the pool for later tasks that use the same class
            later = 0 if spec["corpus"] == "webkb" else sum(
                1 for _, c2 in spec["tasks"][len(chosen) + 1:] if src in c2.values())
            take = len(pool) // (later + 1)
            if cap is not None:
                take = min(cap, take)
            if take == 0:
                raise ValueError(f"{name}: no documents left for class {src!r} in task {task}")
            sel, pools[key] = pool[:take], pool[take:]
            idx_t += sel
            lab_t += [c] * take
        chosen.append(np.array(idx_t))
        labels.append(np.array(lab_t, dtype=np.int64))
        names.append(list(classes.keys()))
    all_idx = np.concatenate(chosen)
    X, vocab = tfidf([corpus.texts[i] for i in all_idx], max_features=max_features)
    tasks, i = [], 0
    for c in chosen:
        tasks.append(X[i:i + c.size])
        i += c.size
    return MultiTaskSet(name, tasks, labels, names, [t for t, _ in spec["tasks"]], vocab, chosen)

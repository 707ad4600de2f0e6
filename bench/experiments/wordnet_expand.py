#!/usr/bin/env python3
"""Does WordNet bridge MetaTool's vocabulary gap?  An offline experiment.

Not product code.  Reads the WordNet 3.0 database files of Debian's
`wordnet-base` (/usr/share/wordnet: index.*, data.*, *.exc) directly, builds a
plain BM25 (k1 1.2, b 0.75) over the MetaTool dev tools (name split at case
changes, digits and _/-, plus the description; lowercase word tokens, no
stopwords removed) and measures top-1/top-3 with WordNet expansion at a
reduced weight, on the document side or on the query side.

Unrelated-request proxy: the 150 Agent Skills dev requests against the
MetaTool tools.  Raw BM25 scores change scale with expansion, so besides their
top-score quantiles the script reports a scale-free figure: the threshold at
which 10% of the unrelated requests still have a top score at or above it,
and the share of MetaTool requests whose right tool ranks first AND clears
that threshold ("top-1 & clears the 10%-unrelated line").  If expansion makes
unrelated requests look related, that share falls even when top-3 rises.

Usage: python3 bench/experiments/wordnet_expand.py [DATA_DIR] [WN_DIR]
DATA_DIR defaults to ../shared/data (dev splits only), WN_DIR /usr/share/wordnet.
"""
import json
import math
import os
import re
import sys
from collections import Counter, defaultdict

DATA = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "../../../shared/data")
WN = sys.argv[2] if len(sys.argv) > 2 else "/usr/share/wordnet"

# Words never expanded (they would be expanded into noise); they stay in
# the BM25 documents and queries as they are.
STOP = set("""a an the and or but if then else of to in on at by for with from
into onto over under about as is are was were be been being am do does did
doing have has had having i me my mine we us our you your yours he him his she
her it its they them their this that these those what which who whom whose
when where why how all any some each every no not nor so than too very can
could will would shall should may might must just also get got give make let
help want need like please tell know find show use using provide provides
one two more most other such only own same up down out off again here there
s t don im ive youre""".split())

# ---------------------------------------------------------------- WordNet
POS = {"noun": "n", "verb": "v", "adj": "a", "adv": "r"}


def load_wordnet(wn):
    index = {p: {} for p in POS.values()}      # lemma -> [offsets], by sense freq
    synsets = {}                               # (pos, off) -> dict
    exc = {p: {} for p in POS.values()}
    for name, p in POS.items():
        with open(os.path.join(wn, "index." + name), encoding="latin-1") as f:
            for line in f:
                if line.startswith("  "):
                    continue
                t = line.split()
                lemma, _pos, scnt, pcnt = t[0], t[1], int(t[2]), int(t[3])
                offs = t[4 + pcnt + 2:]
                index[p][lemma] = offs[:scnt]
        with open(os.path.join(wn, "data." + name), encoding="latin-1") as f:
            for line in f:
                if line.startswith("  "):
                    continue
                head, _, gloss = line.partition(" | ")
                t = head.split()
                off, sstype = t[0], t[2]
                wcnt = int(t[3], 16)
                words = [t[4 + 2 * i].lower() for i in range(wcnt)]
                k = 4 + 2 * wcnt
                pc = int(t[k]); k += 1
                ptrs = []
                for _ in range(pc):
                    sym, poff, ppos, st = t[k], t[k + 1], t[k + 2], t[k + 3]
                    k += 4
                    ppos = "a" if ppos == "s" else ppos
                    ptrs.append((sym, ppos, poff, int(st[2:], 16)))
                definition = gloss.split(";")[0]
                synsets[(p, off)] = {"words": words, "ptrs": ptrs,
                                     "gloss": definition}
        path = os.path.join(wn, name + ".exc")
        with open(path, encoding="latin-1") as f:
            for line in f:
                t = line.split()
                if len(t) >= 2:
                    exc[p].setdefault(t[0], t[1])
    return index, synsets, exc


RULES = {
    "n": [("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"),
          ("shes", "sh"), ("men", "man"), ("ies", "y")],
    "v": [("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"),
          ("ed", ""), ("ing", "e"), ("ing", "")],
    "a": [("er", ""), ("est", ""), ("er", "e"), ("est", "e")],
    "r": [],
}


class WordNet:
    def __init__(self, wn):
        self.index, self.synsets, self.exc = load_wordnet(wn)

    def lemmas(self, word):
        """(pos, lemma) pairs WordNet knows for an inflected word (morphy)."""
        out = []
        for p in "nvar":
            if word in self.index[p]:
                out.append((p, word))
                continue
            if word in self.exc[p] and self.exc[p][word] in self.index[p]:
                out.append((p, self.exc[p][word]))
                continue
            for suf, rep in RULES[p]:
                if word.endswith(suf) and len(word) > len(suf) + 1:
                    base = word[: len(word) - len(suf)] + rep
                    if base in self.index[p]:
                        out.append((p, base))
                        break
        return out

    def senses(self, word, nsenses):
        """The first nsenses synsets of each part of speech the word has."""
        out = []
        for p, lemma in self.lemmas(word):
            for off in self.index[p][lemma][:nsenses]:
                out.append((p, off, lemma))
        return out

    def expand(self, word, kinds, nsenses):
        """Words related to `word`, by kind: syn, hyper, hypo, gloss, deriv."""
        rel = set()
        for p, off, lemma in self.senses(word, nsenses):
            s = self.synsets[(p, off)]
            if "syn" in kinds:
                rel.update(s["words"])
            for sym, pp, po, st in s["ptrs"]:
                kind = None
                if sym in ("@", "@i"):
                    kind = "hyper"
                elif sym in ("~", "~i"):
                    kind = "hypo"
                elif sym == "+":
                    kind = "deriv"
                elif sym in ("&", "\\"):  # similar-to (adj), pertainym (adv)
                    kind = "syn"
                if kind is None or kind not in kinds:
                    continue
                t = self.synsets.get((pp, po))
                if t is None:
                    continue
                if st == 0:          # semantic pointer: the whole synset
                    rel.update(t["words"])
                else:                # lexical pointer: from word st>>8 to word st&255
                    src, dst = st >> 8, st & 0xFF
                    if s["words"][src - 1] == lemma and dst <= len(t["words"]):
                        rel.add(t["words"][dst - 1])
            if "gloss" in kinds and (p, off) == self.senses(word, 1)[0][:2]:
                rel.update(tokens(s["gloss"]))
        toks = set()
        for r in rel:
            for t in tokens(r.replace("_", " ")):
                if t not in STOP:
                    toks.add(t)
        toks.discard(word)
        return toks


# ---------------------------------------------------------------- BM25
def split_name(name):
    name = re.sub(r"([a-z])([A-Z])", r"\1 \2", name)
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", name)
    name = re.sub(r"([A-Za-z])([0-9])|([0-9])([A-Za-z])",
                  lambda m: " ".join(g for g in m.groups() if g), name)
    return re.sub(r"[_\-]", " ", name)


def tokens(text):
    return re.findall(r"[a-z0-9]+", text.lower())


def load_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(l) for l in f if l.strip()]


class BM25:
    def __init__(self, docs, k1=1.2, b=0.75):
        """docs: list of {term: weighted tf}; length = sum of weights."""
        self.docs, self.k1, self.b = docs, k1, b
        self.len = [sum(d.values()) for d in docs]
        self.avg = sum(self.len) / len(docs)
        df = Counter()
        for d in docs:
            df.update(d.keys())
        n = len(docs)
        self.idf = {t: math.log(1 + (n - c + 0.5) / (c + 0.5)) for t, c in df.items()}
        self.post = defaultdict(list)
        for i, d in enumerate(docs):
            for t, tf in d.items():
                self.post[t].append((i, tf))

    def scores(self, qterms):
        """qterms: {term: query weight}."""
        sc = defaultdict(float)
        for t, qw in qterms.items():
            idf = self.idf.get(t)
            if idf is None:
                continue
            for i, tf in self.post[t]:
                norm = self.k1 * (1 - self.b + self.b * self.len[i] / self.avg)
                sc[i] += qw * idf * tf * (self.k1 + 1) / (tf + norm)
        return sc


class Cache:
    def __init__(self, wn, kinds, nsenses):
        self.wn, self.kinds, self.nsenses, self.memo = wn, kinds, nsenses, {}

    def __call__(self, w):
        if w not in self.memo:
            self.memo[w] = (set() if w in STOP or len(w) < 3 or w.isdigit()
                            else self.wn.expand(w, self.kinds, self.nsenses))
        return self.memo[w]


def lemma_of(wn, w):
    """The word's first WordNet lemma (noun first), else the word."""
    if w in STOP:
        return w
    ls = wn.lemmas(w)
    return ls[0][1] if ls else w


def build_doc(words, exp, weight, lemmatize):
    d = Counter()
    for w in words:
        d[lemmatize(w)] += 1.0
    if exp is not None:
        added = set()
        for w in set(words):
            for e in exp(w):
                e = lemmatize(e)
                if e not in d and e not in added:
                    added.add(e)
        for e in added:
            d[e] += weight
    return dict(d)


def build_query(words, exp, weight, lemmatize):
    q = {}
    for w in words:
        q[lemmatize(w)] = 1.0
    if exp is not None:
        for w in set(words):
            for e in exp(w):
                e = lemmatize(e)
                if e not in q:
                    q[e] = weight
    return q


def run(variant, tools, queries, unrel, wn):
    side, kinds, weight, nsenses, lem = variant
    lemmatize = (lambda w: lemma_of(wn, w)) if lem else (lambda w: w)
    exp = Cache(wn, kinds, nsenses) if kinds else None
    dexp = exp if side == "doc" else None
    qexp = exp if side == "query" else None
    texts = [tokens(split_name(t["name"]) + " " + t["description"]) for t in tools]
    docs = [build_doc(w, dexp, weight, lemmatize) for w in texts]
    bm = BM25(docs)
    field = None
    if side == "field":      # expansion words in a field of their own
        base = [build_doc(w, None, 0, lemmatize) for w in texts]
        fdocs = [{t: 1.0 for t in build_doc(w, exp, 1.0, lemmatize) if t not in b} or {"\0": 1.0}
                 for w, b in zip(texts, base)]
        field = BM25(fdocs)
    ids = [t["id"] for t in tools]

    def rank(text):
        qt = build_query(tokens(text), qexp, weight, lemmatize)
        sc = bm.scores(qt)
        if field is not None:
            for i, v in field.scores(qt).items():
                sc[i] += weight * v
        order = sorted(sc.items(), key=lambda kv: -kv[1])
        return [ids[i] for i, _ in order[:10]], (order[0][1] if order else 0.0)

    r1 = r3 = 0
    top1_scores = []            # (score, right at rank 1)
    for q in queries:
        ranked, top = rank(q["query"])
        g = set(q["gold"])
        ok1 = bool(ranked[:1]) and ranked[0] in g
        r1 += ok1
        r3 += any(x in g for x in ranked[:3])
        top1_scores.append((top, ok1))
    un = sorted((rank(q["query"])[1] for q in unrel), reverse=True)
    line = un[max(0, int(len(un) * 0.10) - 1)]   # 10% of unrelated at or above
    cleared = sum(1 for s, ok in top1_scores if ok and s > line)
    rel_med = sorted(s for s, _ in top1_scores)[len(top1_scores) // 2]
    n = len(queries)
    return {"top1": r1 / n, "top3": r3 / n, "cleared": cleared / n,
            "unrel_med": un[len(un) // 2], "unrel_p90": line, "rel_med": rel_med,
            "docterms": sum(len(d) for d in docs) / len(docs)}


def main():
    tools = load_jsonl(os.path.join(DATA, "toolsel/metatool/tools.jsonl"))
    queries = load_jsonl(os.path.join(DATA, "toolsel/metatool/queries.jsonl"))
    unrel = load_jsonl(os.path.join(DATA, "agent-skills/requests.jsonl"))
    wn = WordNet(WN)
    S = {"syn"}
    H = {"syn", "hyper", "hypo"}
    G = {"syn", "hyper", "hypo", "gloss"}
    D = {"syn", "hyper", "hypo", "gloss", "deriv"}
    variants = [
        ("(a) plain BM25", (None, None, 0, 0, False)),
        ("(a') plain + WordNet lemmas (morphy)", (None, None, 0, 0, True)),
    ]
    for side, kinds, w, ns, label in [
        ("doc", S, 0.3, 1, "(b) doc: synonyms (same synset), 1st sense"),
        ("doc", S, 0.3, 3, "(b) doc: synonyms, 3 senses"),
        ("doc", H, 0.3, 1, "(c) doc: + hypernyms/hyponyms"),
        ("doc", G, 0.3, 1, "(d) doc: + gloss words of the 1st sense"),
        ("doc", D, 0.3, 1, "(d') doc: + derivational links"),
        ("field", S, 0.3, 1, "(b2) doc, own field: synonyms"),
        ("field", H, 0.3, 1, "(c2) doc, own field: + hypernyms/hyponyms"),
        ("field", G, 0.3, 1, "(d2) doc, own field: + gloss"),
        ("field", G, 0.3, 3, "(d2) doc, own field: + gloss, 3 senses"),
        ("field", G, 0.1, 1, "(d2) doc, own field: + gloss"),
        ("field", G, 0.5, 1, "(d2) doc, own field: + gloss"),
        ("query", S, 0.3, 1, "(e) query: synonyms"),
        ("query", S, 0.5, 1, "(e) query: synonyms"),
        ("query", S, 0.3, 3, "(e) query: synonyms, 3 senses"),
        ("query", H, 0.3, 1, "(e) query: + hypernyms/hyponyms"),
        ("query", G, 0.3, 1, "(e) query: + gloss"),
        ("query", G, 0.5, 1, "(e) query: + gloss"),
    ]:
        variants.append((f"{label}, w {w}", (side, kinds, w, ns, True)))
    print(f"MetaTool dev: {len(tools)} tools, {len(queries)} requests; "
          f"unrelated: {len(unrel)} Agent Skills requests")
    print("| variant | top-1 | top-3 | top-1 & clears the 10%-unrelated line | "
          "unrelated top score median / p90 | MetaTool top score median | terms/doc |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, v in variants:
        r = run(v, tools, queries, unrel, wn)
        print(f"| {name} | {r['top1']:.3f} | {r['top3']:.3f} | {r['cleared']:.3f} | "
              f"{r['unrel_med']:.2f} / {r['unrel_p90']:.2f} | {r['rel_med']:.2f} | "
              f"{r['docterms']:.0f} |", flush=True)


if __name__ == "__main__":
    main()

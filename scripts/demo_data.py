#!/usr/bin/env python3
"""Synthetic job-search relevance task of the demo model (models/demo-jobs-reranker).

Deterministic (stdlib only): the same arguments give the same bytes. A query asks for a job
(one of ~370 hand-written families of real occupations in scripts/demo_vocab/occupations.txt, or,
in training only, a made-up job of dictionary words and pseudo-words: "quilt technician",
"tavrosk") or only a skill, and optionally a seniority, a skill and a place (436 cities from tzdata
and a hand-written list, or remote). In training, jobs, skills and places are often made up
(MADE_UP: 50% of jobs, 40% of asked skills, 50% of places), and made-up ones appear among the
negatives too, so that what pays is matching the query's words to the posting's, not recognising
the lists' names; postings carry sentences of noise words (FILLER).
Each query comes with 24 candidate postings: full matches, hard negatives that miss one or two of
the asked attributes (the right job elsewhere or at another level; another job that shares a
word with the asked title and has the asked skill and place), and unrelated postings. Each
candidate carries a graded relevance (0-3, see grade()). Queries and postings are written
through many templates, long and short ("Rust developer, Berlin").

Splits (see split_vocab()):
  train / validation / test  the training vocabulary and templates; a query text belongs to one
                             of the three by a hash of its text, so test queries never occur in
                             training ("held-out queries").
  heldout                    families, places, skills, company words and query and posting
                             templates that training never sees (one in five of each, by a hash
                             of its text, or the templates marked held out below): what the model
                             does with vocabulary and phrasing it never saw.
  novel                      the training templates, every job, place and skill made up: what
                             the trainer picks its checkpoint on, beside validation.
tests/demo/requests.jsonl is a third, hand-written set (not from this generator).

  scripts/demo_data.py jsonl --split heldout --queries 1000 --out FILE   # {"query","items","grades"}
  scripts/demo_data.py cases --out tests/demo/cases.jsonl   # rankd's test: relevant vs hard negative
  scripts/demo_data.py tokenizer --out scripts/demo_vocab   # trains tokenizer.model (sentencepiece)
  scripts/demo_data.py vocab   # rewrites demo_vocab/words.txt and places.txt (wamerican, tzdata)
"""
import argparse
import hashlib
import json
import math
import os
import random
import re
import sys
import tempfile

VOCAB_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo_vocab")
# The task's name, recorded in a trained model's train_log.json ("task"): weights trained before
# this generator (the 24-family one) have none.
TASK = "broad-vocabulary jobs, heldout split (scripts/demo_data.py)"
SPLIT_SEEDS = {"train": 1, "validation": 2, "test": 3, "heldout": 4, "novel": 5}
CANDIDATES = 24
CHUNK = 250  # queries per independently seeded chunk (examples() may generate chunks in parallel)
TOKENIZER_VOCAB = 4096
# The tokenizer the model is trained with (train_tokenizer() writes it; the trainer copies it
# into the model folder). Committed, so that every host trains with the same pieces whatever its
# sentencepiece version.
TOKENIZER = os.path.join(VOCAB_DIR, "tokenizer.model")


def _h(text, mod):
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little") % mod


def _lines(name):
    with open(os.path.join(VOCAB_DIR, name)) as f:
        return [l.strip() for l in f if l.strip() and not l.startswith("#")]


# --- vocabulary -----------------------------------------------------------------------------
def _load():
    families = []  # (category, [titles])
    for line in _lines("occupations.txt"):
        cat, titles = line.split(":", 1)
        families.append((cat.strip(), [t.strip() for t in titles.split("|")]))
    skills = {}
    for line in _lines("skills.txt"):
        cat, rest = line.split(":", 1)
        skills[cat.strip()] = [s.strip() for s in rest.split(",")]
    places = [tuple(l.split("\t")) for l in _lines("places.txt")]  # (city, country)
    words = _lines("words.txt")
    return families, skills, places, words


FAMILIES, SKILLS, PLACES, WORDS = _load()


# The families and skills of the README's examples (models/demo-jobs-reranker/example.jsonl, the
# /v1/rerank example) stay in training, so that their synonyms (software engineer = software
# developer) are known; every other family, place, skill and word is held out by its hash alone.
ALWAYS_TRAIN = {("family", "software engineer"), ("family", "rust developer"),
                ("family", "go developer"), ("family", "barista"),
                ("family", "mechanical engineer"), ("family", "line cook"),
                ("skill", "rust"), ("skill", "go"), ("skill", "sql")}


def heldout_text(kind, text):
    """One in five families (by first title), places, skills and words is held out."""
    return (kind, text) not in ALWAYS_TRAIN and _h(f"{kind}:{text}", 5) == 0


def split_vocab(heldout):
    """The vocabulary of the training splits (heldout False) or of the heldout split (True)."""
    fams = [f for f in FAMILIES if heldout_text("family", f[1][0]) == heldout]
    skills = {c: [s for s in ss if heldout_text("skill", s) == heldout] for c, ss in SKILLS.items()}
    places = [p for p in PLACES if heldout_text("place", p[0]) == heldout]
    words = [w for w in WORDS if heldout_text("word", w) == heldout]
    return {"families": fams, "skills": skills, "places": places, "words": words}


VOCAB = {False: split_vocab(False), True: split_vocab(True)}
ALL_FAMILIES = FAMILIES


def _name_words(v):
    return ({w for _, ts in v["families"] for t in ts for w in t.split()} |
            {w for ss in v["skills"].values() for s in ss for w in s.split()} |
            {w.lower() for c, _ in v["places"] for w in c.split()})


# A training dictionary word that is also a word of a held-out title, skill or place and of no
# training one ("musician", "forestry") would bring that held-out word into training as a made-up
# job, skill, place or company word: such words are not drawn in training.
HELDOUT_ONLY_WORDS = _name_words(VOCAB[True]) - _name_words(VOCAB[False])
VOCAB[False]["words"] = [w for w in VOCAB[False]["words"] if w not in HELDOUT_ONLY_WORDS]
# What a pseudo-word (training) must not be: a word of a held-out name or a held-out dictionary word.
HELDOUT_WORDS = _name_words(VOCAB[True]) | set(VOCAB[True]["words"])


def _word_index(families):
    """title word -> indices of the families with a title that has it."""
    index = {}
    for i, (_, titles) in enumerate(families):
        for w in {w for t in titles for w in t.split()}:
            index.setdefault(w, []).append(i)
    return index


# Per split kind (heldout?): the word index of the families its negatives come from.
WORD_INDEX = {False: _word_index(VOCAB[False]["families"]), True: _word_index(ALL_FAMILIES)}
# Made-up jobs of training ("<word> <role>"): the role word and its category.
ROLES = {"technician": "trades", "operator": "manufacturing", "specialist": "office",
         "engineer": "engineering", "assistant": "office", "inspector": "public",
         "consultant": "office", "designer": "creative", "analyst": "data", "installer": "trades",
         "coordinator": "office", "manager": "office", "fitter": "trades", "handler": "transport",
         "planner": "office", "scientist": "science", "developer": "software"}

SENIORITY = {"junior": ["junior", "jr.", "entry level", "graduate"], "mid": [""],
             "senior": ["senior", "sr.", "experienced"], "lead": ["lead", "principal"]}
SENIORITY_QUERY = {"junior": ["junior", "entry level", "graduate"], "senior": ["senior"],
                   "lead": ["lead"]}

# Templates: (training, held out). Query: {c} is the job ("senior python developer"), {p} the place.
QUERY_TEMPLATES = (
    ["{c}", "{c} jobs", "{c} in {p}", "{c} {p}", "{c} jobs in {p}", "{c} job {p}",
     "jobs for {c} in {p}", "{c} near {p}", "{c} vacancies {p}", "hiring {c} {p}",
     "looking for {c} work in {p}", "{p} {c}", "{c} roles in {p}", "{c} position {p}",
     "{c} jobs near {p}", "work as {c} in {p}", "{c} openings", "{c} vacancy in {p}",
     "{c} hiring in {p}", "{c} work {p}", "searching {c} jobs {p}", "new {c} jobs", "{c} job",
     "{c} roles", "{c} jobs {p} full time", "is anyone hiring a {c} in {p}"],
    ["{c} positions around {p}", "need a {c} job in {p}", "any {c} openings in {p}",
     "{c} wanted {p}", "find me {c} roles in {p}", "{c} employment {p}", "{p} area {c} jobs",
     "{c} opportunities in {p}", "{c} careers", "i want to work as {c} in {p}"])
REMOTE_QUERY = (["remote {c}", "{c} remote", "{c} work from home", "remote {c} jobs",
                 "{c} remote work", "remote job as {c}"],
                ["{c} wfh", "{c} from home", "fully remote {c} role"])
SKILL_QUERY = (["{s} {t}", "{t} {s}", "{t} with {s}"], ["{t} who knows {s}", "{t} ({s})"])
SKILL_ONLY = ([" jobs", " roles", "", " work"], [" positions", " openings"])
OPENERS = (["We are hiring {a} {t}", "Join {co} as {a} {t}", "{t} wanted", "{co} is looking for {a} {t}",
            "Open role: {t}", "Our client seeks {a} {t}", "{t} needed", "Vacancy: {t}",
            "{co} - {t}", "Job title: {t}", "{co} needs {a} {t}", "Role: {t}",
            "{co} recruits {a} {t}", "Hiring now - {t}", "{t} at {co}"],
           ["Now recruiting: {t}", "{co} has an opening for {a} {t}", "Position available: {t}",
            "Be our next {t}", "Career opportunity - {t} at {co}", "Apply today: {t}"])
LOCATIONS = (["Location: {p}.", "Based in {p}.", "{p}.", "Office in {p}.", "{p}, {country}.",
              "Job location: {p}.", "City: {p}.", "You will work in {p}."],
             ["Where: {p}.", "The role sits in {p}.", "Work site: {p}.", "Placed at our {p} branch."])
REMOTE = (["Fully remote.", "Location: Remote.", "Remote, any time zone.", "Work from home."],
          ["100% remote role.", "Home-based position.", "Distributed team, no office."])
SKILL_LINES = (["Skills: {s}.", "Requirements: {s}.", "You know {s}.", "Experience with {s}.",
                "Key skills: {s}.", "Knowledge of {s} expected."],
               ["Must have: {s}.", "Ideally you bring {s}.", "Tools: {s}."])
EXTRAS = (["Competitive salary.", "Hybrid, 3 days a week in the office.", "Visa sponsorship.",
           "Full time, permanent.", "Part time possible.", "Benefits: health, dental, pension.",
           "Fast-paced team.", "Night shifts available.", "Great team, flat hierarchy.",
           "Immediate start.", "Weekend work required.", "Training provided.",
           "Temporary contract, 6 months.", "Apply with your CV.", "Friendly team.",
           "Car allowance.", "Permanent role, 40 hours.", "Start date: next month."],
          ["Generous holiday allowance.", "Flexible hours.", "Overtime paid.",
           "Relocation package offered.", "Interviews this week."])
SHORT = (["{t}, {p}", "{t} - {p}", "{t} ({p})", "{t} | {co} | {p}", "{t} in {p}", "{co}: {t}, {p}"],
         ["{p}: {t}", "{t} @ {co}, {p}", "{t} / {p}"])
# Noise words (training): dictionary words of no training name and of no held-out template, put
# into queries and postings of training in frames of their own (NOISE of the time), so that what
# the model learns is to find the job, place and skill in any phrasing, not in the templates'.
_TEMPLATE_WORDS = {w for pair in (QUERY_TEMPLATES, REMOTE_QUERY, SKILL_QUERY, SKILL_ONLY, OPENERS,
                                  LOCATIONS, REMOTE, SKILL_LINES, EXTRAS, SHORT)
                   for t in pair[1] for w in re.findall(r"[a-z]+", re.sub(r"\{\w+\}", " ", t.lower()))}
NOISE_WORDS = [w for w in VOCAB[False]["words"]
               if w not in _name_words(VOCAB[False]) and w not in _TEMPLATE_WORDS]
NOISE = 0.25


def noise(r, n_min=1, n_max=2):
    return " ".join(r.choice(NOISE_WORDS) for _ in range(r.randint(n_min, n_max)))


def noise_frame(r, slot):
    """A sentence of noise words around `slot` ("Gravel tundra: {p}."), capitalised."""
    f = r.choice(["{a} {x}", "{a}: {x}", "{a} {x} {b}", "{x} {a}", "{a} - {x}"])
    f = f.format(a=noise(r), b=noise(r), x=slot)
    return f[0].upper() + f[1:] + "."


COMPANY_SUFFIX = ["Ltd", "Group", "Inc", "Health", "Logistics", "Labs", "Partners", "& Co",
                  "Systems", "Foods", "Services", "Works"]


def split_of(query):
    """train / validation / test by a hash of the query text (1/10 test, 1/20 validation)."""
    h = _h(query, 20)
    return "test" if h < 2 else "validation" if h == 2 else "train"


# --- queries and postings -------------------------------------------------------------------
class Family:
    """One job: its titles (synonyms) and category; made-up jobs have one title."""

    def __init__(self, category, titles, made_up=False):
        self.category, self.titles, self.key = category, titles, titles[0]
        self.made_up = made_up


# Training only: how often a query's job, place or skill is made up from dictionary words
# ("quilt technician", "Port Marmot", "otter"), so that most of what the model learns is to
# match the query's words to the posting's, words it has never seen among them, rather than to
# recognise the training lists' names (a held-out name is, to the model, a made-up one).
# A made-up name's word is a dictionary word or, PSEUDO of the time, a pronounceable non-word
# ("Tavrosk", "quelmar"): held-out names are mostly words the tokenizer splits into rare pieces
# (Guayaquil, Irkutsk), which dictionary words are not. Postings of training get, FILLER of the
# time, a sentence of dictionary words ("Marmot quilt ledger."), so that an unfamiliar sentence
# (a held-out template's) is read as noise, not as a sign against the posting.
MADE_UP = {"family": 0.5, "place": 0.5, "skill": 0.4, "posting_skill": 0.3, "negative": 0.2}
PSEUDO, FILLER = 0.4, 0.3
# The "novel" split: queries of the training templates whose job, place and skill are all made
# up, none of them a training list's name. The trainer picks its checkpoint on it and on
# validation: how well the model matches names it never saw, without looking at the heldout split.
MADE_UP_NOVEL = {"family": 1.0, "place": 1.0, "skill": 1.0, "posting_skill": 0.3, "negative": 0.5}


MADE_UP_PLACES = ["{w}", "{w}ton", "{w}ville", "Port {w}", "{w} City", "{w}burg", "New {w}",
                  "{w} Springs", "San {w}", "{w}stad"]


_ONSETS = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
           "z", "ch", "sh", "th", "tr", "br", "kr", "gu", "qu", "st", "sl", "dr", "zh", "y", ""]
_NUCLEI = ["a", "e", "i", "o", "u", "a", "e", "o", "ia", "ou", "ay", "ei", "ua", "y"]
_CODAS = ["", "", "", "n", "r", "l", "s", "k", "m", "sk", "nd", "rt", "x", "v", "z", "sh"]


def pseudo_word(r):
    """A pronounceable non-word of 2-3 syllables ("tavrosk", "quelmar"), never a held-out name's
    word or a held-out dictionary word."""
    while True:
        w = "".join(r.choice(_ONSETS) + r.choice(_NUCLEI) + (r.choice(_CODAS) if r.random() < 0.5 else "")
                    for _ in range(r.randint(2, 3)))
        if 4 <= len(w) <= 10 and w not in HELDOUT_WORDS:
            return w


def made_up_word(r, vocab):
    """A word for a made-up name: a dictionary word of the split or, PSEUDO of the time, a
    pseudo-word."""
    return pseudo_word(r) if r.random() < PSEUDO else r.choice(vocab["words"])


def draw_place(r, held, mu):
    """A city of the split; in training mu["place"] of them are made up ("Port Marmot",
    "Tavrosk"), so that matching a place name it never saw is learned as such."""
    vocab = VOCAB[held]
    if not held and r.random() < mu["place"]:
        w = made_up_word(r, vocab).title()
        return w if r.random() < 0.5 else r.choice(MADE_UP_PLACES).format(w=w)
    return r.choice(vocab["places"])[0]


CATEGORIES = sorted(set(ROLES.values()))


def made_up_family(r, vocab):
    """A made-up job (training only): "<word> <role>", "<word> <word> <role>" or one or two bare
    words, as real titles are one to four words."""
    k = r.random()
    word = lambda: made_up_word(r, vocab)  # noqa: E731
    while True:  # no word twice ("quilt quilt" has no variant one word away: see made_up_variant)
        if k < 0.75:
            role = r.choice(sorted(ROLES))
            lead = word() if k < 0.55 else word() + " " + word()
            fam = Family(ROLES[role], [lead + " " + role], made_up=True)
        else:
            title = word() if k < 0.9 else word() + " " + word()
            fam = Family(r.choice(CATEGORIES), [title], made_up=True)
        parts = fam.key.split()
        if len(set(parts)) == len(parts):
            return fam


def made_up_variant(r, fam, vocab):
    """Another made-up job one word away from `fam` (a made-up one): a role swapped for another
    role, or a word for another word ("quilt technician" -> "quilt analyst", "otter technician").
    `fam`'s words are distinct (made_up_family), so any draw that changes the word it replaces
    drops that word and the loop ends."""
    parts = fam.key.split()
    assert len(set(parts)) == len(parts), f"made-up title with a repeated word: {fam.key!r}"
    while True:
        i = r.randrange(len(parts))
        new, category = list(parts), fam.category
        if parts[i] in ROLES:
            new[i] = r.choice(sorted(ROLES))
            category = ROLES[new[i]]
        else:
            new[i] = made_up_word(r, vocab)
        if new != parts and not set(parts) <= set(new):
            return Family(category, [" ".join(new)], made_up=True)


def made_up_skill(r, vocab):
    return made_up_word(r, vocab) if r.random() < 0.7 else made_up_word(r, vocab) + " " + made_up_word(r, vocab)


def draw_skill(r, skills, held, mu):
    """A skill for a query: of the job's category, in training mu["skill"] made up."""
    if not held and r.random() < mu["skill"]:
        return made_up_skill(r, VOCAB[held])
    return r.choice(skills)


def title_words(t):
    return set(t.split())


def make_query(r, held, mu=MADE_UP):
    """A query's attributes and its text; mu: how often its names are made up (training)."""
    vocab = VOCAB[held]
    if not held and r.random() < mu["family"]:
        fam = made_up_family(r, vocab)
    else:
        fam = Family(*r.choice(vocab["families"]))
    skills = vocab["skills"][fam.category] or VOCAB[False]["skills"][fam.category]
    q = {"family": fam, "title": r.choice(fam.titles), "seniority": None, "skill": None,
         "place": None, "held": held, "mu": mu}
    if r.random() < 0.1:
        q["title"] = None
        q["skill"] = draw_skill(r, skills, held, mu)
    elif r.random() < 0.35:
        q["skill"] = draw_skill(r, skills, held, mu)
    if q["title"] and r.random() < 0.35:
        q["seniority"] = r.choice(sorted(SENIORITY_QUERY))
    if r.random() < 0.1:
        q["place"] = "remote"
    elif r.random() < 0.65:
        q["place"] = draw_place(r, held, mu)
    words = []
    if q["seniority"]:
        words.append(r.choice(SENIORITY_QUERY[q["seniority"]]))
    if q["title"]:
        core = q["title"]
        if q["skill"]:
            core = r.choice(SKILL_QUERY[held]).format(s=q["skill"], t=core)
        words.append(core)
    else:
        words.append(q["skill"] + r.choice(SKILL_ONLY[held]))
    c = " ".join(words)
    if q["place"] == "remote":
        text = r.choice(REMOTE_QUERY[held]).format(c=c)
    elif q["place"]:
        text = r.choice([t for t in QUERY_TEMPLATES[held] if "{p}" in t]).format(c=c, p=q["place"].lower())
    else:
        text = r.choice([t for t in QUERY_TEMPLATES[held] if "{p}" not in t]).format(c=c)
    if not held and r.random() < NOISE:  # a noise word or two anywhere: an unseen phrasing
        words = text.split()
        words.insert(r.randint(0, len(words)), noise(r))
        text = " ".join(words)
    return q, re.sub(r"\s+", " ", text).strip()


def other_family(r, q, held):
    """Another job, preferably one whose title shares a word with the asked one (the keyword
    trap), but never one whose title has every word of the asked title."""
    fam = q["family"]
    asked = title_words(q["title"] or fam.key)
    # Training never sees a held-out family, not even as a negative; the heldout split draws
    # its negatives from every family.
    pool = ALL_FAMILIES if held else VOCAB[False]["families"]
    index = WORD_INDEX[held]
    if r.random() < 0.7:
        near = sorted({i for w in asked for i in index.get(w, [])})
        near = [pool[i] for i in near if pool[i][1][0] != fam.key]
        near = [f for f in near if not any(asked <= title_words(t) for t in f[1])]
        if fam.made_up and r.random() < 0.5:  # one word away: "quilt analyst", "otter technician"
            return made_up_variant(r, fam, VOCAB[held])
        if near:
            return Family(*r.choice(near))
    while True:
        if not held and r.random() < q["mu"]["negative"]:  # made-up jobs are not all relevant
            f = made_up_family(r, VOCAB[held])
        else:
            f = Family(*r.choice(VOCAB[held]["families"] if r.random() < 0.5 else pool))
        if f.key != fam.key and not any(asked <= title_words(t) for t in f.titles):
            return f


def posting_attrs(r, q, misses, exact):
    """Attributes of a posting that matches q except in `misses` (a set of attribute names);
    `exact`: use the asked title itself (else any title of the family)."""
    held = q["held"]
    vocab = VOCAB[held]
    fam = other_family(r, q, held) if "title" in misses else q["family"]
    title = q["title"] if exact and q["title"] and "title" not in misses else r.choice(fam.titles)
    p = {"family": fam, "title": title}
    p["seniority"] = (q["seniority"] if q["seniority"] and "seniority" not in misses else
                      r.choice([s for s in sorted(SENIORITY) if s != q["seniority"]]))
    pool = vocab["skills"][fam.category] or VOCAB[False]["skills"][fam.category]
    skills = r.sample(pool, min(len(pool), r.randint(2, 4)))
    if not held and r.random() < q["mu"]["posting_skill"]:  # made-up skills are not all asked for
        extra = made_up_skill(r, vocab)
        if extra != q["skill"]:
            skills[r.randrange(len(skills))] = extra
    if q["skill"]:
        if "skill" in misses:
            skills = [s for s in skills if s != q["skill"]]
            if not skills:
                skills = [r.choice([s for s in SKILLS["office"] if s != q["skill"]])]
        elif q["skill"] not in skills:
            skills[r.randrange(len(skills))] = q["skill"]
    p["skills"] = skills
    if q["place"] and "place" not in misses:
        p["place"] = q["place"]
    else:
        p["place"] = q["place"]
        if q["place"] != "remote" and r.random() < 0.1:
            p["place"] = "remote"
        while p["place"] == q["place"]:
            p["place"] = draw_place(r, held, q["mu"])
    p["company"] = (made_up_word(r, vocab) if not held else r.choice(vocab["words"])).title() + \
        " " + r.choice(COMPANY_SUFFIX)
    return p


def grade(q, p):
    """0-3: the asked job (family; for a skill-only query, the skill) is required (else 0);
    3 minus the other asked attributes (seniority, skill, place) the posting misses. A short
    posting lists no skills: it misses an asked skill."""
    if q["title"] is not None and p["family"].key != q["family"].key:
        return 0
    if q["title"] is None and q["skill"] not in p["shown_skills"]:
        return 0
    missed = sum([bool(q["seniority"]) and p["seniority"] != q["seniority"],
                  bool(q["title"] and q["skill"]) and q["skill"] not in p["shown_skills"],
                  bool(q["place"]) and p["place"] != q["place"]])
    return max(0, 3 - missed)


COUNTRY = {city: country for city, country in PLACES}
TRAIN_COUNTRIES = sorted({country for _, country in VOCAB[False]["places"]})


def posting_text(r, p, held, short):
    """The posting's text; sets p["shown_skills"] (what the text lists)."""
    sen = r.choice(SENIORITY[p["seniority"]])
    title = (sen + " " + p["title"]).strip()
    title = title[0].upper() + title[1:]
    place = "Remote" if p["place"] == "remote" else p["place"]
    if short:
        p["shown_skills"] = []
        return r.choice(SHORT[held]).format(t=title, p=place, co=p["company"])
    p["shown_skills"] = p["skills"]
    article = "an" if title[0] in "AEIOU" else "a"
    framed = lambda: not held and r.random() < NOISE  # noqa: E731
    parts = [noise_frame(r, title) if framed() else
             r.choice(OPENERS[held]).format(t=title, co=p["company"], a=article) + "."]
    if p["place"] == "remote":
        parts.append(r.choice(REMOTE[held]))
    elif framed():
        parts.append(noise_frame(r, place))
    else:
        country = COUNTRY.get(p["place"]) or r.choice(TRAIN_COUNTRIES)  # a made-up place's
        parts.append(r.choice(LOCATIONS[held]).format(p=place, country=country))
    skills = ", ".join(p["skills"])
    parts.append(noise_frame(r, skills) if framed() else r.choice(SKILL_LINES[held]).format(s=skills))
    if r.random() < 0.6:
        parts.append(r.choice(EXTRAS[held]))
    if not held and r.random() < FILLER:
        filler = noise(r, 2, 6)
        parts.append(filler[0].upper() + filler[1:] + ".")
    body = parts[2:]
    r.shuffle(body)
    return " ".join(parts[:2] + body)


def candidate_plan(r, q):
    """Per candidate: the set of attributes it misses, and whether it uses the asked title."""
    asked = [a for a in ("seniority", "skill", "place")
             if q[a] and not (a == "skill" and q["title"] is None)]
    plan = [(set(), i == 0) for i in range(r.randint(1, 3))]  # the first: the asked title
    for _ in range(7):
        if asked:
            plan.append(({r.choice(asked)}, r.random() < 0.5))
    for _ in range(4):
        if len(asked) >= 2:
            plan.append((set(r.sample(asked, 2)), r.random() < 0.5))
    for _ in range(7):  # another job that matches the rest (the keyword trap)
        plan.append(({"title"} if q["title"] else {"title", "skill"}, False))
    while len(plan) < CANDIDATES:
        plan.append(({"title", "seniority", "skill", "place"}, False))
    return plan[:CANDIDATES]


def make_example(r, held, split=None, mu=MADE_UP):
    """One query and its candidates; None when the query's text is not of `split` (then no
    candidates are drawn)."""
    q, text = make_query(r, held, mu)
    if split is not None and split_of(text) != split:
        return None
    items, grades = [], []
    for misses, exact in candidate_plan(r, q):
        p = posting_attrs(r, q, misses, exact)
        # Short postings show no skills: never for a full match of a query that asks a skill.
        short = r.random() < 0.2 and not (q["skill"] and "skill" not in misses)
        items.append(posting_text(r, p, held, short))
        grades.append(grade(q, p))
    order = list(range(len(items)))
    r.shuffle(order)
    return {"query": text, "items": [items[i] for i in order], "grades": [grades[i] for i in order]}


def chunk_examples(split, k):
    """Chunk k of `split`: the examples of CHUNK draws that belong to the split (all of them
    for heldout), from their own seed."""
    r = random.Random(f"{SPLIT_SEEDS[split]}:{k}")
    held = split == "heldout"
    out = []
    for _ in range(CHUNK):
        if split == "novel":
            ex = make_example(r, False, None, MADE_UP_NOVEL)
        else:
            ex = make_example(r, held, None if held else split)
        if ex is not None:
            out.append(ex)
    return out


def examples(split, n, map_fn=map):
    """n examples of `split`, each {"query", "items", "grades"}. Query texts are unique in the
    evaluation splits (validation, test, heldout); training may repeat a query with other
    candidates. map_fn maps chunk_examples over (split, k) pairs (e.g. a process pool's map)."""
    seen, out, k = set(), [], 0
    per_chunk = CHUNK * (0.85 if split == "train" else 0.1 if split == "test" else
                         0.05 if split == "validation" else 1.0)  # heldout, novel: every query
    while len(out) < n:
        todo = max(1, math.ceil((n - len(out)) / per_chunk * 1.1))
        for chunk in map_fn(_chunk_star, [(split, k + i) for i in range(todo)]):
            for ex in chunk:
                if len(out) == n:
                    break
                if split != "train":
                    if ex["query"] in seen:
                        continue
                    seen.add(ex["query"])
                out.append(ex)
        k += todo
    return out


def _chunk_star(args):
    return chunk_examples(*args)


def ranking_metrics(scores, grades, k=10):
    """Mean MRR@k (first grade-3 item) and NDCG@k (gain 2^grade - 1) over queries; scores[i] and
    grades[i] are one query's candidates. Ties keep the candidates' order."""
    mrr = ndcg = 0.0
    for s, g in zip(scores, grades):
        ranked = [g[i] for i in sorted(range(len(s)), key=lambda i: -s[i])][:k]
        mrr += next((1.0 / (r + 1) for r, x in enumerate(ranked) if x == 3), 0.0)
        dcg = sum((2 ** x - 1) / math.log2(r + 2) for r, x in enumerate(ranked))
        ideal = sum((2 ** x - 1) / math.log2(r + 2) for r, x in enumerate(sorted(g, reverse=True)[:k]))
        ndcg += dcg / ideal if ideal > 0 else 0.0
    return {"mrr@10": mrr / len(scores), "ndcg@10": ndcg / len(scores)}


def fixed_cases(n=8):
    """n heldout queries, each as a request line with two postings: the first grade-3 one and the
    grade-0 one that shares the most words with the query (a hard negative)."""
    words = lambda t: set(re.findall(r"\w+", t.lower()))
    cases = []
    for ex in examples("heldout", n):
        pairs = list(zip(ex["items"], ex["grades"]))
        rel = next(it for it, g in pairs if g == 3)
        neg = max((it for it, g in pairs if g == 0), key=lambda it: len(words(it) & words(ex["query"])))
        cases.append({"query": ex["query"], "items": [rel, neg]})
    return cases


# --- tokenizer and vendored lists -----------------------------------------------------------
def tokenizer_corpus():
    """Broad text: the whole word list (wamerican; it has ordinary English words that the held-out
    families use, as any English text would), every training family, skill and place, and
    training examples. No held-out family, place, skill or template is written on purpose."""
    lines = [" ".join(WORDS[i:i + 12]) for i in range(0, len(WORDS), 12)]
    lines += [w.title() for w in WORDS[::3]]
    v = VOCAB[False]
    lines += [" | ".join(ts) for _, ts in v["families"]]
    lines += [", ".join(ss) for ss in v["skills"].values()]
    lines += [f"{c}, {k}" for c, k in v["places"]]
    for ex in examples("train", 3000):
        lines.append("query: " + ex["query"])
        lines += ["posting: " + it for it in ex["items"][:8]]
    return lines


def train_tokenizer(out_dir):
    """A byte-fallback BPE sentencepiece model over tokenizer_corpus() (deterministic: one
    thread, every sentence, no shuffling), case-folding (nmt_nfkc_cf: "Berlin" and "berlin" are
    the same pieces). ids: unk 0, bos 1, eos 2, pad 3."""
    import sentencepiece as spm
    out = os.path.abspath(os.path.join(out_dir, "tokenizer.model"))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # relative paths: the model records them, and a temp name would differ
        try:
            with open("corpus.txt", "w") as f:
                for line in tokenizer_corpus():
                    f.write(line + "\n")
            spm.SentencePieceTrainer.train(
                input="corpus.txt", model_prefix="sp", model_type="bpe",
                vocab_size=TOKENIZER_VOCAB, byte_fallback=True, character_coverage=1.0,
                normalization_rule_name="nmt_nfkc_cf", num_threads=1, input_sentence_size=0,
                shuffle_input_sentence=False, unk_id=0, bos_id=1, eos_id=2, pad_id=3,
                minloglevel=2)
            with open("sp.model", "rb") as f, open(out, "wb") as g:
                g.write(f.read())
        finally:
            os.chdir(cwd)


def write_vocab(words_file, zone_file, iso_file):
    """demo_vocab/words.txt from a word list (Debian's wamerican: /usr/share/dict/words): every
    fifth plain lowercase word of 4-10 letters; demo_vocab/places.txt from tzdata's zone1970.tab
    and iso3166.tab (a zone's city and its first country) plus demo_vocab/cities.txt."""
    with open(words_file) as f:
        plain = [w.strip() for w in f if re.fullmatch(r"[a-z]{4,10}", w.strip())]
    with open(os.path.join(VOCAB_DIR, "words.txt"), "w") as f:
        f.write(f"# Every fifth plain word of {words_file} (Debian package wamerican); "
                "scripts/demo_data.py vocab writes this.\n")
        f.writelines(w + "\n" for w in plain[::5])
    with open(iso_file) as f:
        iso = dict(l.rstrip("\n").split("\t")[:2] for l in f if not l.startswith("#"))
    places = {}
    with open(zone_file) as f:
        for line in f:
            if line.startswith("#"):
                continue
            codes, _, zone = line.rstrip("\n").split("\t")[:3]
            city = zone.rsplit("/", 1)[1].replace("_", " ")
            if zone.split("/")[0] in ("Etc", "Antarctica") or not re.fullmatch(r"[A-Za-z .'-]+", city):
                continue
            places.setdefault(city, iso[codes.split(",")[0]])
    for line in _lines("cities.txt"):
        city, country = line.rsplit(", ", 1)
        places.setdefault(city, country)
    with open(os.path.join(VOCAB_DIR, "places.txt"), "w") as f:
        f.write(f"# City<TAB>country from {zone_file} and {iso_file} (Debian package tzdata) and "
                "cities.txt; scripts/demo_data.py vocab writes this.\n")
        f.writelines(f"{c}\t{k}\n" for c, k in sorted(places.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    j = sub.add_parser("jsonl", help="write one split as JSON lines")
    j.add_argument("--split", choices=sorted(SPLIT_SEEDS), required=True)
    j.add_argument("--queries", type=int, required=True)
    j.add_argument("--out", default="-")
    c = sub.add_parser("cases", help="write fixed_cases() as request lines (tests/demo/cases.jsonl)")
    c.add_argument("--out", default="-")
    t = sub.add_parser("tokenizer", help="train tokenizer.model into a directory")
    t.add_argument("--out", required=True)
    v = sub.add_parser("vocab", help="rewrite demo_vocab/words.txt and places.txt")
    v.add_argument("--words", default="/usr/share/dict/words", help="from Debian's wamerican")
    v.add_argument("--zones", default="/usr/share/zoneinfo/zone1970.tab", help="from tzdata")
    v.add_argument("--iso3166", default="/usr/share/zoneinfo/iso3166.tab", help="from tzdata")
    a = ap.parse_args()
    if a.cmd == "tokenizer":
        train_tokenizer(a.out)
        return
    if a.cmd == "vocab":
        write_vocab(a.words, a.zones, a.iso3166)
        return
    f = sys.stdout if a.out == "-" else open(a.out, "w")
    for ex in examples(a.split, a.queries) if a.cmd == "jsonl" else fixed_cases():
        f.write(json.dumps(ex, ensure_ascii=False) + "\n")
    if f is not sys.stdout:
        f.close()


if __name__ == "__main__":
    main()

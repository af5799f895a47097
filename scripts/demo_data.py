#!/usr/bin/env python3
"""Synthetic job-search relevance task of the demo model (models/demo-jobs-reranker).

Deterministic (stdlib only): the same seed gives the same bytes. A query asks for a title (or
only a skill), and optionally a seniority, a skill, a place and a working language; each query
comes with a candidate list of postings: full matches, hard negatives that miss one or two of
the asked attributes (same title family, or a title that shares words but is another job), and
unrelated postings. Each candidate carries a graded relevance (0-3, see grade()).

Splits: a query text belongs to train, validation or test by a hash of its text, so held-out
queries never occur in training. The split's seed draws its queries and candidates.

  scripts/demo_data.py jsonl --split test --queries 1000 --out FILE   # {"query", "items", "grades"}
  scripts/demo_data.py cases --out tests/demo/cases.jsonl   # rankd's test: relevant vs hard negative
  scripts/demo_data.py tokenizer --out DIR   # trains DIR/tokenizer.model (needs sentencepiece)
"""
import argparse
import hashlib
import json
import math
import os
import random
import sys
import tempfile

# Title families: titles in one family are the same job (a synonym is a full match).
FAMILIES = [
    ["software engineer", "software developer", "backend developer", "programmer"],
    ["frontend developer", "web developer", "ui engineer"],
    ["data scientist", "machine learning scientist", "applied scientist"],
    ["data engineer", "etl developer", "big data engineer"],
    ["data analyst", "business intelligence analyst", "reporting analyst"],
    ["devops engineer", "site reliability engineer", "platform engineer"],
    ["mechanical engineer", "design engineer", "mechanical design engineer"],
    ["electrical engineer", "electronics engineer", "hardware engineer"],
    ["product manager", "product owner"],
    ["project manager", "program manager", "delivery manager"],
    ["registered nurse", "staff nurse", "nurse"],
    ["pharmacist", "clinical pharmacist"],
    ["accountant", "bookkeeper", "financial accountant"],
    ["financial analyst", "investment analyst"],
    ["graphic designer", "visual designer", "brand designer"],
    ["ux designer", "product designer", "interaction designer"],
    ["sales associate", "retail associate", "shop assistant"],
    ["account executive", "sales representative", "business development manager"],
    ["customer support agent", "customer service representative", "help desk agent"],
    ["teacher", "school teacher", "instructor"],
    ["truck driver", "delivery driver", "hgv driver"],
    ["warehouse worker", "forklift operator", "picker packer"],
    ["chef", "line cook", "sous chef"],
    ["recruiter", "talent acquisition partner", "sourcer"],
]
SKILLS_BY_FAMILY = [
    ["python", "java", "go", "rust", "c++", "sql", "grpc", "kubernetes"],
    ["react", "typescript", "javascript", "css", "vue", "html"],
    ["python", "pytorch", "statistics", "sql", "spark", "tensorflow"],
    ["spark", "sql", "airflow", "kafka", "python", "scala"],
    ["sql", "excel", "tableau", "power bi", "python", "statistics"],
    ["kubernetes", "terraform", "aws", "gcp", "linux", "prometheus"],
    ["cad", "solidworks", "matlab", "fea", "autocad"],
    ["pcb design", "matlab", "embedded c", "fpga", "verilog"],
    ["roadmapping", "agile", "sql", "user research", "jira"],
    ["agile", "scrum", "jira", "budgeting", "stakeholder management"],
    ["patient care", "icu", "pediatrics", "phlebotomy", "triage"],
    ["dispensing", "patient counseling", "compounding"],
    ["excel", "sap", "payroll", "tax", "quickbooks"],
    ["excel", "financial modeling", "valuation", "sql"],
    ["figma", "photoshop", "illustrator", "typography"],
    ["figma", "user research", "prototyping", "sketch"],
    ["cash handling", "merchandising", "customer service"],
    ["salesforce", "negotiation", "cold calling", "crm"],
    ["zendesk", "customer service", "crm", "troubleshooting"],
    ["mathematics", "english", "physics", "classroom management"],
    ["hazmat", "cdl", "route planning"],
    ["forklift", "inventory", "shipping"],
    ["pastry", "food safety", "menu planning"],
    ["linkedin recruiter", "sourcing", "interviewing", "ats"],
]
PLACES = ["berlin", "munich", "hamburg", "london", "manchester", "paris", "lyon", "madrid",
          "barcelona", "amsterdam", "zurich", "vienna", "new york", "san francisco", "austin",
          "toronto", "bangalore", "singapore", "tokyo", "sydney", "remote"]
SENIORITY = {"junior": ["junior", "jr.", "entry level"], "mid": [""],
             "senior": ["senior", "sr."], "lead": ["lead", "principal"]}
SENIORITY_QUERY = {"junior": ["junior", "entry level"], "senior": ["senior"], "lead": ["lead"]}
LANGUAGES = ["english", "german", "french", "spanish", "dutch", "japanese"]
COMPANIES = ["Acme Corp", "Globex", "Initech", "Umbrella Health", "Stark Industries", "Hooli",
             "Wayne Logistics", "Pied Piper", "Soylent Foods", "Cyberdyne", "Vandelay Imports",
             "Wonka Labs", "Tyrell Systems", "Aperture Works", "Massive Dynamic"]
OPENERS = ["We are hiring {a} {t}", "Join {c} as {a} {t}", "{t} wanted", "{c} is looking for {a} {t}",
           "Open role: {t}", "Our client seeks {a} {t}"]
EXTRAS = ["Competitive salary.", "Hybrid, 3 days a week in the office.", "Visa sponsorship.",
          "Full time, permanent.", "Part time possible.", "Benefits: health, dental, pension.",
          "Fast-paced startup.", "Night shifts available.", "Great team, flat hierarchy."]
SPLIT_SEEDS = {"train": 1, "validation": 2, "test": 3}
TOKENIZER_VOCAB = 2048  # the generator's text supports at most ~2.9k BPE pieces


def split_of(query):
    """train / validation / test by a hash of the query text (1/10 test, 1/20 validation)."""
    h = int.from_bytes(hashlib.sha256(query.encode()).digest()[:4], "little") % 20
    return "test" if h < 2 else "validation" if h == 2 else "train"


def make_query(r):
    """A query's attributes and its text. title is (family, title) or None (skill-only)."""
    fam = r.randrange(len(FAMILIES))
    q = {"family": fam, "title": r.choice(FAMILIES[fam]), "seniority": None, "skill": None,
         "place": None, "language": None}
    if r.random() < 0.15:
        q["title"] = None
        q["skill"] = r.choice(SKILLS_BY_FAMILY[fam])
    elif r.random() < 0.5:
        q["skill"] = r.choice(SKILLS_BY_FAMILY[fam])
    if q["title"] and r.random() < 0.4:
        q["seniority"] = r.choice(sorted(SENIORITY_QUERY))
    if r.random() < 0.6:
        q["place"] = r.choice(PLACES)
    if r.random() < 0.2:
        q["language"] = r.choice(LANGUAGES)
    words = []
    if q["seniority"]:
        words.append(r.choice(SENIORITY_QUERY[q["seniority"]]))
    if q["title"]:
        words.append(q["title"])
        if q["skill"]:
            words.insert(0 if r.random() < 0.5 else len(words), q["skill"])
    else:
        words.append(q["skill"] + r.choice([" jobs", " developer jobs", " roles", ""]))
    if q["language"]:
        words.append(r.choice(["{} speaking", "with {}", "{} language"]).format(q["language"]))
    if q["place"]:
        words.append(q["place"] if q["place"] == "remote" or r.random() < 0.5
                     else "in " + q["place"])
    return q, " ".join(words)


def posting_attrs(r, q, misses):
    """Attributes of a posting that matches q except in `misses` (a set of attribute names)."""
    fam = q["family"]
    if "title" in misses:
        # Another job, preferably one sharing a word with the asked title (engineer, data, ...).
        words = set(" ".join(FAMILIES[fam]).split())
        near = [f for f in range(len(FAMILIES)) if f != fam and words & set(" ".join(FAMILIES[f]).split())]
        fam = r.choice(near if near and r.random() < 0.7 else [f for f in range(len(FAMILIES)) if f != fam])
    p = {"family": fam, "title": r.choice(FAMILIES[fam])}
    seniorities = sorted(SENIORITY)
    p["seniority"] = (q["seniority"] if q["seniority"] and "seniority" not in misses else
                      r.choice([s for s in seniorities if s != q["seniority"]]))
    skills = r.sample(SKILLS_BY_FAMILY[fam], min(len(SKILLS_BY_FAMILY[fam]), r.randint(2, 4)))
    if q["skill"]:
        if "skill" in misses:
            skills = [s for s in skills if s != q["skill"]] or [r.choice(
                [s for s in SKILLS_BY_FAMILY[(fam + 1) % len(FAMILIES)] if s != q["skill"]])]
        elif q["skill"] not in skills:
            skills[r.randrange(len(skills))] = q["skill"]
    p["skills"] = skills
    p["place"] = (q["place"] if q["place"] and "place" not in misses else
                  r.choice([x for x in PLACES if x != q["place"]]))
    p["language"] = (q["language"] if q["language"] and "language" not in misses else
                     r.choice([x for x in LANGUAGES if x != q["language"]]))
    return p


def grade(q, p):
    """0-3: the asked job (title family; for a skill-only query, the skill) is required (else 0);
    3 minus the other asked attributes (seniority, skill, place, language) the posting misses."""
    if q["title"] is not None and p["family"] != q["family"]:
        return 0
    if q["title"] is None and q["skill"] not in p["skills"]:
        return 0
    missed = sum([bool(q["seniority"]) and p["seniority"] != q["seniority"],
                  bool(q["title"] and q["skill"]) and q["skill"] not in p["skills"],
                  bool(q["place"]) and p["place"] != q["place"],
                  bool(q["language"]) and p["language"] != q["language"]])
    return max(0, 3 - missed)


def posting_text(r, p):
    sen = r.choice(SENIORITY[p["seniority"]])
    title = (sen + " " + p["title"]).strip()
    title = title[0].upper() + title[1:]
    company = r.choice(COMPANIES)
    place = "Remote" if p["place"] == "remote" else p["place"].title()
    article = "an" if title[0] in "AEIOU" else "a"
    parts = [r.choice(OPENERS).format(t=title, c=company, a=article) + "."]
    loc = [f"Location: {place}.", f"Based in {place}.", f"{place}."]
    if p["place"] == "remote":
        loc = ["Fully remote.", "Location: Remote.", "Remote, any time zone."]
    parts.append(r.choice(loc))
    parts.append(r.choice(["Skills: ", "Requirements: ", "You know "]) + ", ".join(p["skills"]) + ".")
    parts.append(r.choice(["Working language: {}.", "{} required.", "Fluent {}."]).format(
        p["language"].title()))
    if r.random() < 0.6:
        parts.append(r.choice(EXTRAS))
    body = parts[2:]
    r.shuffle(body)
    return " ".join(parts[:2] + body)


# Candidate list of one query: how many postings miss which attributes.
def candidate_plan(r, q):
    asked = [a for a in ("seniority", "skill", "place", "language")
             if q[a] and not (a == "skill" and q["title"] is None)]
    plan = [set() for _ in range(r.randint(1, 3))]
    for _ in range(8):
        if asked:
            plan.append({r.choice(asked)})
    for _ in range(4):
        if len(asked) >= 2:
            plan.append(set(r.sample(asked, 2)))
    for _ in range(8):  # another job that matches the rest (the keyword trap)
        plan.append({"title"} if q["title"] else {"title", "skill"})
    while len(plan) < 24:
        plan.append({"title", "seniority", "skill", "place", "language"})
    return plan[:24]


def make_example(r):
    q, text = make_query(r)
    items, grades = [], []
    for misses in candidate_plan(r, q):
        p = posting_attrs(r, q, misses)
        items.append(posting_text(r, p))
        grades.append(grade(q, p))
    order = list(range(len(items)))
    r.shuffle(order)
    return {"query": text, "items": [items[i] for i in order], "grades": [grades[i] for i in order]}


def examples(split, n):
    """n examples of `split`, each {"query", "items", "grades"}, query texts unique per split."""
    r = random.Random(SPLIT_SEEDS[split])
    seen, out = set(), []
    while len(out) < n:
        ex = make_example(r)
        if split_of(ex["query"]) != split or ex["query"] in seen:
            continue
        seen.add(ex["query"])
        out.append(ex)
    return out


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
    """n test queries, each as a request line with two postings: the first grade-3 one and the
    grade-0 one that shares the most words with the query (a hard negative)."""
    words = lambda t: set(t.lower().replace(".", " ").replace(",", " ").split())
    cases = []
    for ex in examples("test", n):
        pairs = list(zip(ex["items"], ex["grades"]))
        rel = next(it for it, g in pairs if g == 3)
        neg = max((it for it, g in pairs if g == 0), key=lambda it: len(words(it) & words(ex["query"])))
        cases.append({"query": ex["query"], "items": [rel, neg]})
    return cases


def train_tokenizer(out_dir):
    """A byte-fallback BPE sentencepiece model over train-split text (deterministic: one thread,
    every sentence, no shuffling). ids: unk 0, bos 1, eos 2, pad 3."""
    import sentencepiece as spm
    out = os.path.abspath(os.path.join(out_dir, "tokenizer.model"))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # relative paths: the model records them, and a temp name would differ
        try:
            with open("corpus.txt", "w") as f:
                for ex in examples("train", 3000):
                    f.write("query: " + ex["query"] + "\n")
                    for item in ex["items"]:
                        f.write("posting: " + item + "\n")
            spm.SentencePieceTrainer.train(
                input="corpus.txt", model_prefix="sp", model_type="bpe",
                vocab_size=TOKENIZER_VOCAB, byte_fallback=True, character_coverage=1.0,
                num_threads=1, input_sentence_size=0, shuffle_input_sentence=False,
                unk_id=0, bos_id=1, eos_id=2, pad_id=3, minloglevel=2)
            with open("sp.model", "rb") as f, open(out, "wb") as g:
                g.write(f.read())
        finally:
            os.chdir(cwd)


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
    a = ap.parse_args()
    if a.cmd == "tokenizer":
        train_tokenizer(a.out)
        return
    f = sys.stdout if a.out == "-" else open(a.out, "w")
    for ex in examples(a.split, a.queries) if a.cmd == "jsonl" else fixed_cases():
        f.write(json.dumps(ex, ensure_ascii=False) + "\n")
    if f is not sys.stdout:
        f.close()


if __name__ == "__main__":
    main()

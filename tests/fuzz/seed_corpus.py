"""Writes the IR texts that the C test suite parses (string literals that
start a program, "{ lambda", with adjacent literals joined) into
tests/fuzz/corpus/, one file per distinct text, named by its hash."""
import ast
import hashlib
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
# A run of adjacent C string literals (no raw strings in these tests).
LITERALS = re.compile(r'(?:"(?:[^"\\\n]|\\.)*"\s*)+')


def texts(source):
    for m in LITERALS.finditer(source):
        parts = re.findall(r'"((?:[^"\\\n]|\\.)*)"', m.group(0))
        text = "".join(ast.literal_eval('"' + p + '"') for p in parts)
        if text.lstrip().startswith("{ lambda"):
            yield text


def main():
    out = ROOT / "tests" / "fuzz" / "corpus"
    out.mkdir(parents=True, exist_ok=True)
    seen = set()
    for path in sorted((ROOT / "tests").glob("*.c*")):
        for t in texts(path.read_text(errors="replace")):
            h = hashlib.sha1(t.encode()).hexdigest()
            if h not in seen:
                seen.add(h)
                (out / h).write_text(t)
    print(f"{len(seen)} seeds in {out}")


if __name__ == "__main__":
    main()

""""Make it permanent": the code that keeps the changes fastmon measured faster, each
with the settings it depends on, and each written into the script it names
(``fastmon report --patch``): a unified diff that ``git apply`` or ``patch -p1`` takes.
The edits read the script's syntax tree, so they land on the call the advice names."""

from __future__ import annotations

import ast
import difflib
from pathlib import Path

from fastmon.advisor.facts import Facts
from fastmon.advisor.knobs import LIGHTNING, PLAIN, framework, loader_setting
from fastmon.advisor.rules import BY_ID
from fastmon.advisor.types import AFTER_IMPORT, BY_HAND, KEYWORDS, REPLACE_CALL, Permanent
from fastmon.common.verdicts import FASTER, params_text

# A loader setting that does nothing without another: kept beside it, said so
NEEDS = {"persistent_workers": "num_workers", "prefetch_factor": "num_workers"}


def permanent_changes(applied: list[dict], facts: dict, advice: list[dict] = ()) -> list[dict]:
    """Each kept change measured faster, as the code that keeps it: its rule's
    ``permanent``, the DataLoader's changes in one call (with any setting they need that
    was kept without being measured faster, marked so). Each: code, location, edit,
    keywords, calls, note."""
    run_facts = Facts(values=facts)
    where = {a["id"]: a.get("location") for a in advice}
    out, loader_params, needed = [], {}, {}
    for a in applied:
        # kept, or measured faster as the run ended (its verdict sent, not yet taken)
        if not a.get("kept") and not (a.get("state") == "incomplete" and a.get("verdict") == FASTER):
            continue
        params = a.get("params") or {}
        if a["id"].startswith("dataloader."):
            if a.get("verdict", FASTER) == FASTER:  # older records: no verdict, kept meant faster
                loader_params.update(params)
            else:
                needed.update(params)
            continue
        rule = BY_ID.get(a["id"])
        if a.get("verdict", FASTER) == FASTER and rule is not None and hasattr(rule, "permanent"):
            out.append(as_dict(rule.permanent(params, run_facts), where.get(a["id"])))
    if loader_params:
        notes = []
        for key, requires in NEEDS.items():
            if key in loader_params and requires in needed and requires not in loader_params:
                loader_params[requires] = needed[requires]
                notes.append(f"{params_text({requires: needed[requires]})}: not itself measured faster; "
                             f"{key} needs it")
        loader = run_facts.training_loader() or {}
        code = loader_setting(run_facts, **loader_params)
        edit = KEYWORDS if framework(run_facts) in (PLAIN, LIGHTNING) and loader.get("location") else BY_HAND
        out.insert(0, as_dict(Permanent(code, edit, loader_params, ("DataLoader",), "; ".join(notes)),
                              loader.get("location")))
    return out


def as_dict(permanent: Permanent, location: str | None) -> dict:
    return {"code": permanent.code, "location": location, "edit": permanent.edit,
            "keywords": dict(permanent.keywords), "calls": list(permanent.calls), "note": permanent.note}


def line_text(change: dict) -> str:
    """One change as the report and the end screen write it."""
    where = f"  # {change['location']}" if change.get("location") else ""
    note = f" ({change['note']})" if change.get("note") else ""
    return f"{change['code']}{where}{note}"


# --- written into the script ------------------------------------------------------------
class NotWritten(Exception):
    """A change that cannot be written at its location: why."""


def split_location(location: str) -> tuple[Path, int]:
    path, _, line = location.rpartition(":")
    return Path(path), int(line)


def edited(source: str, line: int, change: dict) -> str:
    """``source`` with ``change`` written in at ``line`` (1-based)."""
    if change["edit"] == AFTER_IMPORT:
        return after_import(source, change["code"])
    tree = ast.parse(source)
    names = set(change.get("calls") or ())
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and node.lineno <= line <= node.end_lineno and (not names or call_name(node) in names)]
    if not calls:
        raise NotWritten(f"no call to {' or '.join(sorted(names)) or 'anything'} at line {line}")
    call = min(calls, key=lambda n: (n.end_lineno - n.lineno, n.end_col_offset - n.col_offset))
    text = source.encode()
    starts = line_starts(text)

    def at(lineno: int, col: int) -> int:
        return starts[lineno - 1] + col

    edits = []  # (start, end, new bytes)
    if change["edit"] == REPLACE_CALL:
        edits.append((at(call.lineno, call.col_offset), at(call.end_lineno, call.end_col_offset),
                      change["code"].encode()))
    elif change["edit"] == KEYWORDS:
        existing = {kw.arg: kw for kw in call.keywords if kw.arg}
        added: dict[ast.Call, list[str]] = {}
        workers = existing.get("num_workers")
        for key, value in change["keywords"].items():
            node = existing[key].value if key in existing else None
            code = repr(value)
            if key == "persistent_workers" and value is True and workers is not None \
                    and argument_of(tree, workers.value):
                # the count stays the script's option: persistent workers only where it gives some
                # (persistent_workers=True with --num-workers 0 is a ValueError in DataLoader)
                code = f"{ast.get_source_segment(source, workers.value)} > 0"
            option = node is not None and argument_of(tree, node)
            if option:  # set from the script's command line (args.num_workers): its default changes
                default = next((kw.value for kw in option.keywords if kw.arg == "default"), None)
                if default is not None:
                    edits.append((at(default.lineno, default.col_offset),
                                  at(default.end_lineno, default.end_col_offset), code.encode()))
                else:
                    added.setdefault(option, []).append(f"default={code}")
            elif node is not None:
                edits.append((at(node.lineno, node.col_offset), at(node.end_lineno, node.end_col_offset), code.encode()))
            else:
                added.setdefault(call, []).append(f"{key}={code}")
        for into, words in added.items():
            close = at(into.end_lineno, into.end_col_offset) - 1  # the call's ")"
            before = text[:close].rstrip()
            comma = b"" if before.endswith((b"(", b",")) else b", "
            edits.append((close, close, comma + ", ".join(words).encode()))
    else:
        raise NotWritten("written by hand")
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text.decode()


def argument_of(tree: ast.AST, value: ast.expr) -> ast.Call | None:
    """The script's ``add_argument`` call that ``value`` (``args.num_workers``) reads, if
    that is what it is: a change written there keeps the script's own option working."""
    if not (isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name)
            and value.value.id in parsed_names(tree)):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and call_name(node) == "add_argument":
            dest = next((kw.value.value for kw in node.keywords
                         if kw.arg == "dest" and isinstance(kw.value, ast.Constant)), None)
            options = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            named = next((o for o in options if o.startswith("--")), options[0] if options else "")  # as argparse
            if (dest or named.lstrip("-").replace("-", "_")) == value.attr:
                return node
    return None


def parsed_names(tree: ast.AST) -> set[str]:
    """The names the script binds to its parsed options: ``args = parser.parse_args()``
    (or the first of ``parse_known_args()``'s pair)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and call_name(node.value) in ("parse_args", "parse_known_args"):
            for target in node.targets:
                first = target.elts[0] if isinstance(target, ast.Tuple) and target.elts else target
                if isinstance(first, ast.Name):
                    names.add(first.id)
    return names


def call_name(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def line_starts(text: bytes) -> list[int]:
    starts, offset = [], 0
    for line in text.splitlines(keepends=True):
        starts.append(offset)
        offset += len(line)
    return starts + [offset]


def after_import(source: str, statement: str) -> str:
    """``statement`` on its own line after the script's first top-level ``import torch``
    (one is added where there is none)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    if statement in (line.strip() for line in lines):
        return source
    imports = [n for n in tree.body if isinstance(n, ast.Import) and any(a.name == "torch" for a in n.names)]
    if imports:
        at, new = imports[0].end_lineno, [statement + "\n"]
    else:
        heads = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "__future__"
                 or isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and n is tree.body[0]]
        at, new = (heads[-1].end_lineno if heads else 0), ["import torch\n", statement + "\n"]
    return "".join(lines[:at] + new + lines[at:])


def patch(changes: list[dict], cwd: Path, run_cwd: Path | None = None) -> tuple[str, list[str]]:
    """A unified diff writing ``changes`` into their scripts (their locations as from
    ``run_cwd``, where the run started; the diff's paths as from ``cwd``), and a line for
    each change it could not write, saying why."""
    by_file: dict[Path, list[tuple[int, dict]]] = {}
    skipped = []
    for change in changes:
        if change["edit"] == BY_HAND or not change.get("location"):
            skipped.append(f"{line_text(change)}: by hand")
            continue
        path, line = split_location(change["location"])
        by_file.setdefault(Path(run_cwd or cwd) / path, []).append((line, change))
    out = []
    for path, edits in by_file.items():
        try:
            source = path.read_text()
        except OSError as exc:
            skipped += [f"{line_text(c)}: {path} cannot be read ({exc.strerror})" for _, c in edits]
            continue
        new = source
        # lines further down first, then what goes in after the imports: no edit moves another's line
        for line, change in sorted(edits, key=lambda e: (e[1]["edit"] != AFTER_IMPORT, e[0]), reverse=True):
            try:
                new = edited(new, line, change)
            except (NotWritten, SyntaxError) as exc:
                skipped.append(f"{line_text(change)}: {exc}")
        name = relative(path, cwd)
        out += difflib.unified_diff(source.splitlines(keepends=True), new.splitlines(keepends=True),
                                    f"a/{name}", f"b/{name}")
    return "".join(out), skipped


def relative(path: Path, cwd: Path) -> str:
    try:
        return str(path.resolve().relative_to(cwd.resolve()))
    except ValueError:
        return str(path.resolve()).lstrip("/")

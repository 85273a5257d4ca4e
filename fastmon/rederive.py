"""Advice of a record made by other rules than today's (``advisor.rules_digest`` differs,
or the record predates it), derived again from the record with today's: recorded advice
is never shown as current. What fastmon tried in that run stays, with its measured result."""

from __future__ import annotations

from fastmon.advisor import Facts, advise, rules_digest
from fastmon.advisor.verdict import of_straggler
from fastmon.common.verdicts import OPEN
from fastmon.progress import script_args
from fastmon.records import RunRecord
from fastmon.step_table import StepTable
from fastmon.summary import current_window, samples_during, steady_span


def advised_by_other_rules(meta: dict) -> bool:
    return meta.get("advisor") != rules_digest()


def advice_now(record: RunRecord, rank: int, table: StepTable, left_out, applied: list[dict], facts: dict,
               meta: dict, straggler: bool = False) -> list[dict]:
    """Today's rules over ``rank``'s steady run as it is after fastmon's changes (``straggler``:
    that rank is the one the others wait for, the live advisor's choice too); where the run's
    advisor acted on a finding (tried, kept, dismissed), the record's entry with its result."""
    recorded = {a["id"]: a for a in record.advice()}
    acted = {key: a for key, a in recorded.items() if a.get("status", OPEN) != OPEN}
    if not len(table):
        return list(acted.values())
    window = current_window(table, applied, left_out)
    span = steady_span(record, rank, table, left_out)
    run_facts = Facts(values=dict(facts, script=meta.get("script") or "", script_argv=script_args(meta.get("target")
                                                                                               or []),
                                  advice_acted_on=sorted(acted)),
                      events=record.events(), gpu=samples_during(record.samples("gpu"), span),
                      host_cpu_count=(facts.get("environment") or {}).get("cpu_count") or 1,
                      ranks=max(len(record.ranks()), 1))
    out = []
    for advice in advise(window, run_facts):
        found = dict(advice.to_dict(), status=OPEN)
        if straggler:
            found["evidence"] = of_straggler(rank, found["evidence"])
        out.append(acted.pop(advice.id) if advice.id in acted else found)
    return out + list(acted.values())

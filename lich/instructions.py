"""The system prompt of a run: ``system_prompt`` plus the ``lich_instructions``
sections, assembled under one budget, every cut reported.

>>> prompt = assemble_instructions("Be brief.", [InstructionSection("Use tabs.", "house")], 100)
>>> prompt.text
'Be brief.\\n\\nUse tabs.'
"""

from __future__ import annotations

from collections.abc import Sequence

from attrs import frozen

from lich.context import estimate_text_tokens
from lich.events import InstructionReport, InstructionsCut
from lich.hooks import InstructionSection

__all__ = ["SECTION_SEPARATOR", "AssembledPrompt", "assemble_instructions"]

#: Between the parts of the system prompt.
SECTION_SEPARATOR = "\n\n"


@frozen
class AssembledPrompt:
    """The system prompt as assembled: its ``text``, a report per section (in the
    order of the prompt, the cut ones included) and the ``instructions_cut`` events
    of the cut ones (lowest priority first, as they were cut)."""

    text: str
    reports: tuple[InstructionReport, ...] = ()
    cuts: tuple[InstructionsCut, ...] = ()


def assemble_instructions(base: str, sections: Sequence[InstructionSection],
                          budget_tokens: int) -> AssembledPrompt:
    """``base`` (the config's system prompt), then the cacheable ``sections`` in the
    order given, then the others, separated by blank lines.

    When the whole would pass ``budget_tokens`` (estimated with
    :func:`lich.context.estimate_text_tokens`, the separators counted), sections are
    cut whole, the lowest ``priority`` first and of equal ones the later first,
    until it fits or none is left; ``base`` is never cut. A cut section keeps its
    place in the reports (``kept: false``) and gets an ``instructions_cut`` event.
    Deterministic: the same inputs give the same bytes (a provider's prompt cache
    depends on it).
    """
    ordered = ([s for s in sections if s.cacheable]
               + [s for s in sections if not s.cacheable])
    separator = estimate_text_tokens(SECTION_SEPARATOR)
    costs = [estimate_text_tokens(s.text) + separator for s in ordered]
    total = estimate_text_tokens(base) + sum(costs)
    kept = [True] * len(ordered)
    cuts: list[InstructionsCut] = []
    # Lowest priority first; of equal ones, the later (the one placed after) first.
    for index in sorted(range(len(ordered)), key=lambda i: (ordered[i].priority, -i)):
        if total <= budget_tokens:
            break
        kept[index] = False
        total -= costs[index]
        section = ordered[index]
        cuts.append(InstructionsCut(section.source, section.priority, costs[index] - separator,
                                    budget_tokens))
    text = SECTION_SEPARATOR.join(
        [base, *(s.text for s, keep in zip(ordered, kept, strict=True) if keep)])
    reports = tuple(
        InstructionReport(s.source, s.priority, cost - separator, s.cacheable, keep)
        for s, cost, keep in zip(ordered, costs, kept, strict=True))
    return AssembledPrompt(text, reports, tuple(cuts))

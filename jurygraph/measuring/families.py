"""Model families, for the same-family warning: does a judge belong to the family of a system it judges?

A judge that shares a lineage with one of the two answers' systems may prefer it (self-enhancement bias; the
FastChat judges picked their own model's answer up to 87 % of the time). The rule is one table, ``FAMILIES``:
a family and the regular expression its model names match (lower case, searched, first family wins). A name
is a model spec's model (``openai:gpt-4o-mini@http://...`` -> ``gpt-4o-mini``) or a system's name as the
data gives it (FairEval's ``gpt35`` and ``vicuna``; a pairwise item's ``meta.model_1`` / ``meta.model_2``).
Fine-tunes go with their base model (Vicuna, Alpaca, Koala are LLaMA fine-tunes). ``--family NAME=REGEX``
adds rules before these.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# (family, pattern): the one table of the rule. OpenAI's is anchored at a name's start (or after a provider
# prefix) so that EleutherAI's gpt-j / gpt-neox and Nomic's gpt4all (a LLaMA fine-tune) are not OpenAI models.
FAMILIES: tuple[tuple[str, str], ...] = (
    ("GPT (OpenAI)", r"(^|[/:])(gpt-?(3|4(?!all)|5)|chatgpt|text-davinci|davinci|o[1-9](-|$))"),
    ("LLaMA (Meta) and fine-tunes", r"llama|vicuna|alpaca|koala|guanaco|wizardlm|tulu|gpt4all"),
    ("Claude (Anthropic)", r"claude"),
    ("Gemini / PaLM / Gemma / T5 (Google)", r"gemini|gemma|palm|bard|bison|(^|[-/:])(flan-)?t5(-|$)"),
    ("Mistral and fine-tunes", r"mistral|mixtral|zephyr"),
    ("Qwen (Alibaba)", r"qwen"),
    ("DeepSeek", r"deepseek"),
    ("Phi (Microsoft)", r"(^|[^a-z])phi-?\d"),
    ("Pythia / GPT-J / GPT-NeoX (EleutherAI) and fine-tunes", r"gpt-?j|gpt-?neo|pythia|dolly|oasst"),
    ("Falcon (TII)", r"falcon"),
    ("Command (Cohere)", r"command-r|cohere"),
    ("ChatGLM (Zhipu)", r"chatglm|glm-\d"),
    ("StableLM (Stability AI)", r"stablelm"),
    ("RWKV", r"rwkv"),
    ("MPT (MosaicML)", r"(^|[/:])mpt-"),
    ("SmolLM (Hugging Face)", r"smollm|^local$"),
)

Rule = Sequence[tuple[str, str]]


def model_name(label: str) -> str:
    """The model's name in a spec label: ``openai:gpt-4o-mini@http://host/v1`` -> ``openai:gpt-4o-mini``,
    lower case (the provider prefix stays: the OpenAI pattern allows for it)."""
    return label.split("@", 1)[0].strip().lower()


def parse_rules(values: Sequence[str] | None) -> list[tuple[str, str]]:
    """``--family NAME=REGEX`` options as rules (checked before :data:`FAMILIES`)."""
    rules = []
    for value in values or []:
        name, sep, pattern = value.partition("=")
        if not sep or not name.strip() or not pattern.strip():
            raise ValueError(f"--family {value!r}: give NAME=REGEX, e.g. --family 'Acme=acme-|ourbot'")
        try:
            re.compile(pattern)
        except re.error as err:
            raise ValueError(f"--family {value!r}: {err}") from None
        rules.append((name.strip(), pattern.strip()))
    return rules


def family_of(label: str | None, rules: Rule = FAMILIES) -> str | None:
    """The family of a model or system name under ``rules`` (None when no rule matches)."""
    if not label:
        return None
    name = model_name(label)
    for family, pattern in rules:
        if re.search(pattern, name):
            return family
    return None

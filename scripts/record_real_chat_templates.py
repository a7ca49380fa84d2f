#!/usr/bin/env python3
"""Records tests/fixtures/chat_template/<name>.json for the templates in
tests/fixtures/chat_template/real/ (models' stock templates, or ones written with the same Jinja
constructs where the model's licence keeps its text out of this tree), rendered by jinja2 as
scripts/record_tokenizer_fixtures.py renders the others (llama-cpp-python's Jinja2ChatFormatter).

Unlike that script it needs only jinja2, and each template gets its own conversations: Mistral
Small's puts today's date in its default system prompt, so its conversations all bring one.

Usage: python3 scripts/record_real_chat_templates.py
"""
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.sandbox

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIR = os.path.join(ROOT, "tests/fixtures/chat_template")

SYSTEM = {"role": "system", "content": "You are a pirate.  \n"}
CONVERSATIONS = {
    "system_user": [SYSTEM, {"role": "user", "content": "Hello!"}],
    "system_multi_turn": [SYSTEM, {"role": "user", "content": " 2+2? "},
                          {"role": "assistant", "content": "4\n"}, {"role": "user", "content": "And 3+3?"}],
    "system_unicode": [{"role": "system", "content": "caf\u00e9"},
                       {"role": "user", "content": "  \U0001F600 \u65e5\u672c\tok  "}],
    "user_only": [{"role": "user", "content": "What is the capital of France?"}],
    "multi_turn": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
                   {"role": "user", "content": "Tell me a joke.\nMake it short."}],
}
# name: (bos, eos, conversations)
TEMPLATES = {
    "mistral_small_31": ("<s>", "</s>", ["system_user", "system_multi_turn", "system_unicode"]),
    "llama31_style": ("<|begin_of_text|>", "<|eot_id|>", list(CONVERSATIONS)),
}


def main():
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    for name, (bos, eos, convs) in TEMPLATES.items():
        with open(os.path.join(DIR, "real", name + ".jinja"), encoding="utf-8") as f:
            src = f.read()
        tmpl = env.from_string(src)
        cases = []
        for conv in convs:
            for agp in (False, True):
                out = tmpl.render(messages=CONVERSATIONS[conv], bos_token=bos, eos_token=eos, add_generation_prompt=agp,
                                  raise_exception=raise_exception, strftime_now=lambda fmt: "2000-01-01")
                cases.append({"name": f"{conv}/{'gen' if agp else 'nogen'}", "messages": CONVERSATIONS[conv],
                              "add_generation_prompt": agp, "expected": out})
        path = os.path.join(DIR, name + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"generator": "scripts/record_real_chat_templates.py",
                       "reference": f"jinja2 {jinja2.__version__} ImmutableSandboxedEnvironment(trim_blocks=True, "
                                    "lstrip_blocks=True) as llama-cpp-python's Jinja2ChatFormatter",
                       "template_name": name, "template": src, "bos_token": bos, "eos_token": eos, "cases": cases},
                      f, ensure_ascii=False, separators=(",", ":"))
            f.write("\n")
        print(f"wrote {os.path.relpath(path, ROOT)} ({len(cases)} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

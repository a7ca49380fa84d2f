#!/usr/bin/env python3
"""Records the tokenizer reference fixtures in tests/fixtures/tokenizer/ with llama.cpp (through
llama-cpp-python, vocab only), and the chat-template reference renders in
tests/fixtures/chat_template/ with jinja2 configured as llama-cpp-python's Jinja2ChatFormatter.

Usage: python3 scripts/record_tokenizer_fixtures.py [--model models/smollm2-135m-instruct-q4_1.gguf]

Files written:
  tokenizer/mt_bench.json    every turn of the 80 MT-Bench prompts
  tokenizer/hard_cases.json  a hand-written corpus of tricky inputs, parse_special on and off
  tokenizer/random_mix.json  seeded random strings over a pool of tricky pieces
  tokenizer/vocab_facts.json bos/eos, end-of-generation and control ids, piece checksums
  tokenizer/pre_gpt2.json, tokenizer/pre_default.json
                             the same vocab with tokenizer.ggml.pre rewritten to "gpt-2" and
                             "default" (a vocab-only GGUF copy in a temporary folder), to check
                             the other pre-tokenizers and the space clean-up on decode
  chat_template/smollm2.json the model's template rendered for several conversations
Each token entry holds the text, parse_special, the reference ids and the reference
llama_detokenize output with and without special tokens.
"""
import argparse
import ctypes
import json
import os
import random
import sys
import tempfile

import gguf
import jinja2
import jinja2.ext
import jinja2.sandbox
import llama_cpp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MT_BENCH = "/work/shared/data/mt_bench/question.jsonl"

HARD_CASES = [
    "",
    " ",
    "  ",
    "\t",
    "\n",
    "\n\n\n",
    " \n \n ",
    "   leading spaces",
    "trailing spaces   ",
    "tabs\tbetween\t\twords\t",
    "line one\nline two\r\nline three\n",
    "mixed \t\n whitespace \u00a0 nbsp \u3000 ideographic \u2028 line sep",
    "Hello world",
    "Hello, world! How are you?",
    "I'M here, don't you know? She'LL say 'yes' and we've we're they'd it's I'm you'll",
    "DON'T WON'T CAN'T Y'ALL o'clock rock'n'roll '",
    "''''  ' s 'S 'T 're 'RE",
    "1234567890",
    "3.14159 2.71828 -0.5 +1e10 1,000,000.00 0x1F 0b1010",
    "Version 1.2.3-rc.4 released on 2024-05-17 at 13:45:07",
    " 1 22 333 4444 55555",
    "\u0663\u0664\u0665 Arabic-Indic digits, \u00b2 superscript, \u00bd half, \u216b roman",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 stra\u00dfe \u00c5ngstr\u00f6m",
    "cafe\u0301 combining acute, a\u0308\u0304 stacked marks, Z\u0351\u036b\u0343",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002\u6f22\u5b57\u3068\u304b\u306a",
    "\u4e2d\u6587\u5206\u8bcd\u6d4b\u8bd5\uff1a\u4eca\u5929\u5929\u6c14\u5f88\u597d\uff01",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u0627\u0644\u0639\u0631\u0628\u064a",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e \u0939\u093f\u0928\u094d\u0926\u0940",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
    "Emoji: \U0001F600\U0001F602\U0001F914 \U0001F44D\U0001F3FD thumbs",
    "ZWJ: \U0001F469\u200D\U0001F4BB \U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466 family",
    "Flags: \U0001F1FA\U0001F1F8 \U0001F1EF\U0001F1F5 \U0001F1E9\U0001F1EA",
    "\u2764\ufe0f variation selector, \u00a9\u00ae\u2122 symbols, \u20ac\u00a3\u00a5 currency",
    "Math: \u2200x\u2208\u211d, \u2203y: x\u00b2 + y\u00b2 \u2264 1 \u2192 \u221e",
    "def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += v[i] * 2;\n}\n",
    "#include <vector>\nstd::vector<int> v{1, 2, 3};\nauto x = v.at(0) << 3 >> 1;",
    "fn main() { let s: &str = \"hi\"; println!(\"{s:?}\"); }",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
    "<div class=\"a\">Hello &amp; <b>bye</b></div>",
    "{\"key\": [1, 2.5, null, true], \"nested\": {\"x\": \"y\"}}",
    "$ ls -la | grep '^d' && echo \"done\" > /dev/null 2>&1",
    "https://example.com/path/to/page?query=1&x=y#frag mailto:a.b@c.org",
    "C:\\Users\\name\\file.txt ~/.bashrc ../../up",
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "text<|endoftext|>more<|im_end|><|im_start|>",
    "<|im_start|><|im_start|> <|im_end|> <|im_end",
    "<reponame>x<filename>y.py<gh_stars>10",
    "<|im_start |> not special, <im_start> neither",
    "!!! ??? ... ,,, ;;; ::: --- ___ === +++ *** ### @@@ %%% ^^^ &&& ||| ~~~ ``` \"\"\"",
    "a.b,c;d:e!f?g(h)i[j]k{l}m<n>o/p\\q|r",
    "ALLCAPS lowercase MixedCase camelCase snake_case kebab-case PascalCase",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "x" * 300,
    "ab" * 150 + " " + "1" * 50,
    "\u00a0\u00a0 nbsp at start",
    "end with newline\n",
    "end with spaces and newline  \n",
    " \t \n",
    "a\u200bb zero width space, a\u200cb zwnj, \ufeffBOM",
    "control chars \x01\x02\x1f\x7f and \x00 nul",
    "\ud7ff\ue000\uf8ff\ufffd private use and replacement",
    "\U00010348 gothic \U0001d400 math bold A \U00020000 CJK ext B",
    "It's 5 o'clock; we're 2 late. You'll see 3's and 4'd.",
    "  \n\n  indented\n    more\n\ttab\n",
]

POOL = ["a", "Z", "the", " ", "  ", "\t", "\n", "\r\n", "0", "7", "42", "3.5", ".", ",", "'", "'s", "'ll",
        "'RE", "\"", "-", "_", "(", ")", "{", "}", "$", "`", "~", "^", "\u00e9", "\u00df", "\u65e5", "\u672c",
        "\ud55c", "\u0645", "\u05e9", "\u0301", "\u0915", "\u093f", "\U0001F600", "\U0001F44D\U0001F3FD",
        "\U0001F469\u200D\U0001F4BB", "\U0001F1FA\U0001F1F8", "\u00a0", "\u3000", "\u2028", "\u0663",
        "\u00b2", "\u216b", "\u00bd", "\u20ac", "\u00a9", "<|im_start|>", "<|im_end|>", "<", "|", ">",
        "\x0b", "\x0c", "\x85", "\u200d", "\ufe0f"]


def load_vocab(model_path):
    llm = llama_cpp.Llama(model_path=model_path, vocab_only=True, verbose=False)
    return llm, llm._model.vocab


def detokenize(vocab, ids, special):
    arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
    size = 64 + 16 * len(ids)
    while True:
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, size, False, special)
        if n >= 0:
            return buf.raw[:n]
        size = -n + 1


def piece(vocab, tid, special):
    size = 256
    while True:
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_token_to_piece(vocab, tid, buf, size, 0, special)
        if n >= 0:
            return buf.raw[:n]
        size = -n + 1


def entry(llm, vocab, text, parse_special):
    ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=parse_special)
    e = {"text": text, "parse_special": parse_special, "ids": ids}
    for special, key in ((True, "decoded_special"), (False, "decoded")):
        out = detokenize(vocab, ids, special)
        e[key] = out.decode("utf-8", errors="surrogateescape")
        if out != out.decode("utf-8", errors="replace").encode("utf-8"):
            raise SystemExit(f"reference decode of {text!r} is not valid UTF-8")
    return e


def fnv1a64(data, h=0xcbf29ce484222325):
    for b in data:
        h ^= b
        h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def write(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {os.path.relpath(path, ROOT)} ({os.path.getsize(path)} bytes)")


def header(kind):
    return {"generator": "scripts/record_tokenizer_fixtures.py", "reference": f"llama-cpp-python {llama_cpp.__version__} ({kind})",
            "model": "smollm2-135m-instruct-q4_1.gguf"}


def record_tokens(llm, vocab, out_dir):
    turns = []
    with open(MT_BENCH, encoding="utf-8") as f:
        for line in f:
            turns.extend(json.loads(line)["turns"])
    write(os.path.join(out_dir, "mt_bench.json"),
          dict(header("tokenize, vocab_only"), entries=[entry(llm, vocab, t, False) for t in turns]))

    hard = [entry(llm, vocab, t, p) for t in HARD_CASES for p in (False, True)]
    write(os.path.join(out_dir, "hard_cases.json"), dict(header("tokenize, vocab_only"), entries=hard))

    rng = random.Random(20240517)
    mix = []
    for _ in range(400):
        text = "".join(rng.choice(POOL) for _ in range(rng.randint(1, 24)))
        mix.append(entry(llm, vocab, text, rng.random() < 0.5))
    write(os.path.join(out_dir, "random_mix.json"), dict(header("tokenize, vocab_only"), entries=mix))

    n = llama_cpp.llama_vocab_n_tokens(vocab)
    block = 1024
    sums = []
    for start in range(0, n, block):
        h = 0xcbf29ce484222325
        for tid in range(start, min(n, start + block)):
            p = piece(vocab, tid, True)
            h = fnv1a64(len(p).to_bytes(4, "little") + p, h)
        sums.append(f"{h:016x}")
    facts = dict(header("vocab queries"),
                 vocab_size=n,
                 bos_id=llama_cpp.llama_vocab_bos(vocab),
                 eos_id=llama_cpp.llama_vocab_eos(vocab),
                 eog_ids=[i for i in range(n) if llama_cpp.llama_vocab_is_eog(vocab, i)],
                 control_ids=[i for i in range(n) if llama_cpp.llama_vocab_is_control(vocab, i)],
                 piece_checksum_block=block,
                 piece_checksums_fnv1a64=sums)
    write(os.path.join(out_dir, "vocab_facts.json"), facts)


def vocab_only_copy(src, pre, path):
    """Writes a GGUF with src's metadata (no tensors) and tokenizer.ggml.pre = pre."""
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(path, arch=bytes(r.fields["general.architecture"].parts[-1]).decode())
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        if k == "tokenizer.ggml.pre":
            w.add_string(k, pre)
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            if f.types[1] == gguf.GGUFValueType.STRING:
                w.add_array(k, [bytes(f.parts[i]).decode("utf-8", errors="surrogateescape") for i in f.data])
            else:
                w.add_array(k, [f.parts[i][0].item() for i in f.data])
        elif t == gguf.GGUFValueType.STRING:
            w.add_string(k, bytes(f.parts[f.data[0]]).decode())
        else:
            w.add_key_value(k, f.parts[f.data[0]][0].item(), t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def record_other_pre_types(model_path, out_dir):
    rng = random.Random(7)
    mix = ["".join(rng.choice(POOL) for _ in range(rng.randint(1, 24))) for _ in range(120)]
    extra = ["a  1", "x +=1", "$$$ ~~~ ^^ <=> |||", "1234567 89 0.125", "Hello , world ! It ' s ' quoted ' ok .",
             "don 't , we 're , you 've , I 'm , it 's , they 'll , he 'd"]
    with tempfile.TemporaryDirectory() as tmp:
        for pre, name in (("gpt-2", "pre_gpt2.json"), ("default", "pre_default.json")):
            path = os.path.join(tmp, f"vocab_{name}.gguf")
            vocab_only_copy(model_path, pre, path)
            llm, vocab = load_vocab(path)
            entries = [entry(llm, vocab, t, p) for t in HARD_CASES + extra for p in (False, True)]
            entries += [entry(llm, vocab, t, i % 2 == 0) for i, t in enumerate(mix)]
            write(os.path.join(out_dir, name), dict(header("tokenize, vocab_only"), pre=pre, entries=entries))
            del llm


def chat_env():
    # As llama_cpp.llama_chat_format.Jinja2ChatFormatter builds it.
    return jinja2.sandbox.ImmutableSandboxedEnvironment(
        loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True,
        extensions=[jinja2.ext.loopcontrols])


CONVERSATIONS = {
    "system_user": [{"role": "system", "content": "You are a pirate."}, {"role": "user", "content": "Hello!"}],
    "user_only": [{"role": "user", "content": "What is the capital of France?"}],
    "multi_turn": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
                   {"role": "user", "content": "Tell me a joke.\nMake it short."}],
    "system_multi_turn": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "2+2?"},
                          {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}],
    "unicode_content": [{"role": "user", "content": "  caf\u00e9 \U0001F600 \u65e5\u672c  "}],
    "empty": [],
}


def record_chat(template, bos, eos, out_path, name):
    env = chat_env()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    tmpl = env.from_string(template)
    cases = []
    for conv_name, messages in CONVERSATIONS.items():
        for agp in (False, True):
            out = tmpl.render(messages=messages, bos_token=bos, eos_token=eos,
                              add_generation_prompt=agp, raise_exception=raise_exception)
            cases.append({"name": f"{conv_name}/{'gen' if agp else 'nogen'}", "messages": messages,
                          "add_generation_prompt": agp, "expected": out})
    write(out_path, {"generator": "scripts/record_tokenizer_fixtures.py",
                     "reference": f"jinja2 {jinja2.__version__} ImmutableSandboxedEnvironment(trim_blocks=True, "
                                  "lstrip_blocks=True) as llama-cpp-python's Jinja2ChatFormatter",
                     "template_name": name, "template": template, "bos_token": bos, "eos_token": eos,
                     "cases": cases})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models/smollm2-135m-instruct-q4_1.gguf"))
    args = ap.parse_args()
    llm, vocab = load_vocab(os.path.abspath(args.model))
    record_tokens(llm, vocab, os.path.join(ROOT, "tests/fixtures/tokenizer"))
    record_other_pre_types(os.path.abspath(args.model), os.path.join(ROOT, "tests/fixtures/tokenizer"))
    meta = llm.metadata
    bos = piece(vocab, llama_cpp.llama_vocab_bos(vocab), True).decode()
    eos = piece(vocab, llama_cpp.llama_vocab_eos(vocab), True).decode()
    record_chat(meta["tokenizer.chat_template"], bos, eos,
                os.path.join(ROOT, "tests/fixtures/chat_template/smollm2.json"), "smollm2")
    for name in sorted(os.listdir(os.path.join(ROOT, "tests/fixtures/chat_template/templates"))):
        with open(os.path.join(ROOT, "tests/fixtures/chat_template/templates", name), encoding="utf-8") as f:
            src = f.read()
        base = os.path.splitext(name)[0]
        record_chat(src, "<s>", "</s>", os.path.join(ROOT, f"tests/fixtures/chat_template/{base}.json"), base)
    return 0


if __name__ == "__main__":
    sys.exit(main())

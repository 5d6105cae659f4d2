# Writes crates/engine/src/constrain/gbnf_cases.json: the grammar cases of
# llama.cpp tests/test-grammar-integration.cpp (ggml-org/llama.cpp at
# 66f3357d20027ecd1b3da543efbcf7945a1ebb8a), transcribed from its C++ source
# (test_grammar calls; token cases as id/text parts; invalid grammars).
# Run: python3 scripts/gbnf-cases.py
import json
I12 = " " * 12
cases = []
def C(name, grammar, p, f):
    cases.append({"name": name, "grammar": grammar, "pass": p, "fail": f})

C("simple grammar",
  "\n            root ::= expr\n            expr ::= term (\"+\" term)*\n            term ::= number\n            number ::= [0-9]+",
  ["42", "1+2+3+4+5", "123+456"],
  ["+", "/ 3", "1+2+3+4+5+", "12a45"])

C("medium complexity grammar",
  "\n            root ::= expression\n            expression ::= term ws ((\"+\"|\"-\") ws term)*\n            term ::= factor ws ((\"*\"|\"/\") ws factor)*\n            factor ::= number | variable | \"(\" expression \")\" | function-call\n            number ::= [0-9]+\n            variable ::= [a-zA-Z_][a-zA-Z0-9_]*\n            function-call ::= variable ws \"(\" (expression (\",\" ws expression)*)? \")\"\n            ws ::= [ \\t\\n\\r]?",
  ["42", "1*2*3*4*5", "x", "x+10", "x1+y2", "(a+b)*(c-d)", "func()", "func(x,y+2)",
   "a*(b+c)-d/e", "f(g(x),h(y,z))", "x + 10", "x1 + y2", "(a + b) * (c - d)", "func()",
   "func(x, y + 2)", "a * (b + c) - d / e", "f(g(x), h(y, z))", "123+456",
   "123*456*789-123/456+789*123",
   "123+456*789-123/456+789*123-456/789+123*456-789/123+456*789-123/456+789*123-456"],
  ["+", "/ 3x", "x + + y", "a * / b", "func(,)", "func(x y)", "(a + b", "x + y)",
   "a + b * (c - d", "42 +", "x +", "x + 10 +", "(a + b) * (c - d", "func(",
   "func(x, y + 2", "a * (b + c) - d /", "f(g(x), h(y, z)",
   "123+456*789-123/456+789*123-456/789+123*456-789/123+456*789-123/456+789*123-456/"])

C("special characters",
  "\n            root ::= ... \"abc\" ...\n            ",
  ["abcabcabc", "aaaabcccc", "🔵🟠✅abc❌🟠🔵"],
  ["aaabcccc", "aaaaabcccc", "aaaabccc", "aaaabccccc", "🔵🟠✅❌abc❌✅🟠🔵", "🔵🟠abc🟠🔵"])

C("* quantifier", "root ::= \"a\"*",
  ["", "a", "aaaaa", "a" * 18, "a" * 62],
  ["b", "ab", "aab", "ba", "a" * 62 + "b"])
C("+ quantifier", "root ::= \"a\"+",
  ["a", "aaaaa", "a" * 18, "a" * 62],
  ["", "b", "ab", "aab", "ba", "a" * 62 + "b"])
C("? quantifier", "root ::= \"a\"?", ["", "a"], ["b", "ab", "aa", "ba"])
C("mixed quantifiers",
  "\n            root ::= cons+ vowel* cons? (vowel cons)*\n            vowel ::= [aeiouy]\n            cons ::= [bcdfghjklmnpqrstvwxyz]\n            ",
  ["yes", "no", "noyes", "crwth", "four", "bryyyy"],
  ["yess", "yesno", "forty", "catyyy"])
C("simple exact repetition", "\n            root ::= [ab]{4}\n        ",
  ["aaaa", "bbbb", "abab"], ["a", "b", "aaaaa"])
C("simple min repetition", "\n            root ::= [ab]{4,}\n        ",
  ["aaaa", "aaaaab", "bbbb", "ababab"], ["", "aba"])
C("simple max repetition", "\n            root ::= [ab]{0,4}\n        ",
  ["", "a", "aa", "aaa", "aaab"], ["aaaaa"])
C("min / max repetition", "\n            root ::= (\"0x\" [A-F0-9]{2} \" \"?){3,5}\n        ",
  ["0xFF 0x12 0xAB", "0xFF 0x12 0xAB 0x00 0x00"],
  ["", "0xFF", "0xFF 0x12", "0xFF 0x12 0xAB 0x00 0x00 0x00"])
C("segfault", "\n            root ::= ( [x]* )*\n        ", ["", "x", "xx"], ["y", "yy"])

# token cases: parts are lists of text strings and integer token ids
T = lambda n: n
token_cases = []
NOTE = ("No real vocabulary: the C++ test encodes token(N) as 5 bytes (0xff, then N as big-endian u32) and its "
        "parse_tokens() turns that into token id N with piece \"<[N]>\"; every other UTF-8 codepoint is fed as its own "
        "piece with token id 0 (i.e. plain text, not a special token). In pass/fail strings here, \"<[N]>\" stands for one "
        "token with id N; pass_parts/fail_parts give the same unambiguously (integer = token id, string = text).")
def TC(name, grammar, pp, fp):
    def s(parts):
        return "".join(f"<[{x}]>" if isinstance(x, int) else x for x in parts)
    token_cases.append({"name": name, "grammar": grammar,
                        "pass": [s(p) for p in pp], "fail": [s(p) for p in fp],
                        "pass_parts": pp, "fail_parts": fp, "note": NOTE})

TC("simple grammar with tokens",
   "\n            root ::= <[10]> content <[11]>\n            content ::= (!<[11]>)*",
   [[10, "hello world", 11],
    [10, "text with ", 12, " other tokens ", 13, " mixed in", 11],
    [10, 11],
    [10, 12, 13, 14, 15, 11],
    [10, "a", 11]],
   [[10, "missing end token"],
    [10],
    ["missing start token", 11],
    [10, 11, 11],
    [11, "wrong order", 10]])

TC("complex grammar with tokens",
   "\n            root ::= reasoning+ content tool-call*\n            reasoning ::= <[10]> (!<[11]>)* <[11]>\n            content ::= <[20]> (!<[21]>)* <[21]>\n            tool-call ::= <[12]> name <[13]> args <[14]>\n            name ::= (!<[13]>)+\n            args ::= (!<[14]>)*",
   [[10, "I am thinking", 11, 20, "hello world!", 21, 12, "search", 13, "query=test", 14],
    [10, "reasoning 1", 11, 10, "reasoning 2", 11, 20, 21, 12, "tool", 13, 14],
    [10, 11, 20, "content", 21],
    [10, "think", 12, " nested", 11, 20, 10, "more content", 21, 12, "fn", 13, "x=1,y=2", 14, 12, "fn2", 13, 14],
    [10, "reasoning", 11, 10, "more", 11, 10, "even more", 11, 20, "text", 21, 12, "a", 13, "b", 14, 12, "c", 13, "d", 14]],
   [[20, "content only", 21],
    [10, "no closing reasoning"],
    [10, 11, 20, "no closing content"],
    [10, 11, 20, 21, 12, "incomplete tool"],
    [10, 11, 11, 20, 21]])

invalid = [
 {"name": "missing root",
  "grammar": "\n        rot ::= expr\n        expr ::= term (\"+\" term)*\n        term ::= number\n        number ::= [0-9]+",
  "why": "no 'root' rule (test_failure_missing_root: the parser itself accepts it and yields rules, but there is no 'root' symbol; llama_grammar_init_impl rejects it with \"grammar does not contain a root symbol\")"},
 {"name": "missing reference",
  "grammar": "root ::= expr\n        expr ::= term (\"+\" term)*\n        term ::= numero\n        number ::= [0-9]+",
  "why": "undefined rule: 'numero' is referenced but never defined; parse fails (rules empty) with \"Undefined rule identifier 'numero'\" (test_failure_missing_reference)"},
 {"name": "left recursion (simple)",
  "grammar": "root ::= \"a\" | root \"a\"",
  "why": "left recursion: root directly left-recursive; grammar build fails (test_failure_left_recursion)"},
 {"name": "left recursion (medium)",
  "grammar": "\n        root ::= asdf\n        asdf ::= \"a\" | asdf \"a\"\n        ",
  "why": "left recursion: asdf directly left-recursive; grammar build fails (test_failure_left_recursion)"},
 {"name": "left recursion (hard)",
  "grammar": "\n        root ::= asdf\n        asdf ::= \"a\" | foo \"b\"\n        foo ::= \"c\" | asdf \"d\" | \"e\"",
  "why": "left recursion: indirect, asdf -> foo -> asdf; grammar build fails (test_failure_left_recursion)"},
 {"name": "left recursion (hardest)",
  "grammar": "\n        root ::= asdf\n        asdf ::= \"a\" | foo \"b\"\n        foo ::= \"c\" | empty asdf \"d\" | \"e\"\n        empty ::= \"blah\" | ",
  "why": "left recursion through a nullable rule: 'empty' can match the empty string, so foo -> empty asdf -> foo is left-recursive; grammar build fails (test_failure_left_recursion)"},
]

out = {"source": "ggml-org/llama.cpp tests/test-grammar-integration.cpp at 66f3357d20027ecd1b3da543efbcf7945a1ebb8a",
       "cases": cases, "invalid": invalid, "token_cases": token_cases}
import os
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates/engine/src/constrain/gbnf_cases.json")
with open(path, "w", encoding="utf-8") as fh:
    json.dump(out, fh, ensure_ascii=False, indent=1)
    fh.write("\n")
print(len(cases), len(invalid), len(token_cases))

#!/usr/bin/env python3
"""The module import graph of one crate's src/, and its circles.

    scripts/import-graph.py [crates/zlock-server/src] [--edges]

A module is a file (`a/b.rs` or `a/b/mod.rs` is module `a::b`; `lib.rs` is the crate
root). An edge A -> B is any path in A's code (not comments) that names module B
through `crate::`, `super::` or `self::` (the deepest module the path names), or a
child module by a bare path (`core::Core` in `pipeline`). A parent and its children
count like any other modules: `pipeline` using `core` and `core` using `pipeline::Item`
is a circle. Test files
(`*_tests.rs`, `tests.rs`) and `#[cfg(test)] mod tests` blocks are left out: tests may
reach anywhere. Prints each strongly connected component of more than one module (a
circle), largest first, and exits 0 (it reports; it does not judge).
"""
import os
import re
import sys


def modules(root):
    mods = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            if not f.endswith('.rs'):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), root)[:-3].split(os.sep)
            if rel[-1] in ('mod', 'lib', 'main'):
                rel = rel[:-1]
            if rel and (rel[-1].endswith('_tests') or rel[-1] == 'tests'):
                continue
            mods['::'.join(rel)] = os.path.join(dirpath, f)
    return mods


def code_of(path):
    text = open(path).read()
    # Drop `#[cfg(test)] mod x { ... }` blocks (brace-matched) and comments.
    out, i = [], 0
    for m in re.finditer(r'#\[cfg\(test\)\]\s*mod\s+\w+\s*\{', text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {'{': 1, '}': -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    text = ''.join(out)
    return re.sub(r'//[^\n]*', '', text)


def resolve(mod, path, mods):
    parts = path.split('::')
    base = mod.split('::') if mod else []
    if parts[0] == 'crate':
        cur, parts = [], parts[1:]
    else:
        cur = list(base)
        while parts and parts[0] in ('super', 'self'):
            if parts.pop(0) == 'super':
                cur = cur[:-1]
    best = None
    for p in parts:
        if not re.fullmatch(r'[a-z_][a-z0-9_]*', p):
            break
        cur = cur + [p]
        if '::'.join(cur) in mods:
            best = '::'.join(cur)
    return best


def graph(root):
    mods = modules(root)
    edges = {m: set() for m in mods}
    pat = re.compile(r'\b(?:crate|super|self)(?:::(?:super|self|[A-Za-z_][A-Za-z0-9_]*|\{[^}]*\}))+')
    for m, path in mods.items():
        code = code_of(path)
        for hit in pat.finditer(code):
            text = hit.group(0)
            # `a::{b, c::d}`: each branch is a path.
            if '{' in text:
                head, _, rest = text.partition('::{')
                branches = [head + '::' + b.strip() for b in rest.rstrip('}').split(',') if b.strip()]
            else:
                branches = [text]
            for b in branches:
                t = resolve(m, b, mods)
                if t is not None and t != m:
                    edges[m].add(t)
        # A child module named by a bare path (`core::Core` in `pipeline`).
        for child in (c for c in mods if c.rsplit('::', 1)[0] == m and c != m and '::' in (m + '::x')):
            name = child.rsplit('::', 1)[-1]
            if m == '' and '::' in child:
                continue
            if re.search(r'(?<![:\w])' + name + r'::', code):
                edges[m].add(child)
    return edges


def circles(edges):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out, key=len, reverse=True)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith('--')]
    root = args[0] if args else 'crates/zlock-server/src'
    edges = graph(root)
    if '--edges' in sys.argv:
        for m in sorted(edges):
            for t in sorted(edges[m]):
                print(f'{m or "crate"} -> {t or "crate"}')
    found = circles(edges)
    print(f'{len(edges)} modules, {sum(len(t) for t in edges.values())} edges, {len(found)} circles')
    for c in found:
        print(f'  circle of {len(c)}: ' + ', '.join(x or 'crate' for x in c))


if __name__ == '__main__':
    main()

#!/usr/bin/env python3
"""Golden data for tests/tree/test_tree_*.cc: pytree structure as JAX sees it.

Builds a set of pytrees (dicts with unsorted keys, nested lists and tuples,
None, dataclasses registered with jax.tree_util.register_dataclass, classes
registered with register_pytree_node) whose leaves are distinct ints, and
writes trees.txt next to this script. The C++ test rebuilds every tree from
its `build` line with kiln's builders and compares what JAX recorded.

Format (one record per blank-line-free block, tokens separated by spaces;
`%XX` escapes any byte outside [A-Za-z0-9_.-] in keys, aux strings and
encoded treedefs):

  case <name>
  is_leaf <- | none | tuple | Linear>   predicate given to tree_flatten
  build <spec>                          the tree in insertion order:
      leaf <int> | none | tuple <n> <spec>... | list <n> <spec>...
      | dict <n> (<key> <spec>)...
      | node <aux|-> <n> <spec>...      Node (register_pytree_node, aux str/None)
      | box <int> <n> <spec>...         Box (register_pytree_node, aux int)
      | data <Class> <n_meta> <meta>... <n> <spec>...   a registered dataclass
  treedef <str(treedef)>                rest of the line
  num_leaves <n>
  num_nodes <n>
  leaf <id | T:<encoded str(tree_structure(subtree))>> <keystr>   per leaf, in order
  end

  map <name>                            jax.tree.map(f, tree0, tree1)
  tree0 <spec>
  tree1 <spec>
  match <leaf id of tree0> <encoded str(tree_structure(subtree of tree1))>  per leaf
  mismatch <keystr JAX reports, may be empty>    instead of match lines
  end

Run: python3 tests/golden/trees.py   (deterministic; rerun when JAX changes)
"""
import dataclasses
import os
import re

import jax

jax.config.update("jax_platforms", "cpu")

from jax import tree_util as tu  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SAFE = re.compile(rb"[A-Za-z0-9_.\-]")


def enc(s):
    """Percent-encodes a str so that it is one space-free token."""
    if s == "":
        return "%"  # a lone % stands for the empty string
    return "".join(chr(b) if SAFE.fullmatch(bytes([b])) else f"%{b:02X}"
                   for b in s.encode("utf-8"))


@dataclasses.dataclass
class Linear:
    w: object
    b: object
    name: str


tu.register_dataclass(Linear, data_fields=["w", "b"], meta_fields=["name"])


@dataclasses.dataclass
class Point:
    x: object
    y: object


tu.register_dataclass(Point, data_fields=["x", "y"], meta_fields=[])


class Node:
    """A generic node: children plus a str (or None) aux."""

    def __init__(self, *children, aux=None):
        self.children = children
        self.aux = aux


tu.register_pytree_node(Node, lambda n: (n.children, n.aux),
                        lambda aux, ch: Node(*ch, aux=aux))


class Box:
    """A generic node with an int aux (kiln prints it through print_aux)."""

    def __init__(self, *children, scale=1):
        self.children = children
        self.scale = scale


tu.register_pytree_node(Box, lambda b: (b.children, b.scale),
                        lambda aux, ch: Box(*ch, scale=aux))


def spec(x):
    """The tree as kiln's builders will see it: containers in insertion order."""
    if x is None:
        return ["none"]
    if isinstance(x, int):
        return ["leaf", str(x)]
    if isinstance(x, tuple):
        return ["tuple", str(len(x))] + [t for c in x for t in spec(c)]
    if isinstance(x, list):
        return ["list", str(len(x))] + [t for c in x for t in spec(c)]
    if isinstance(x, dict):
        out = ["dict", str(len(x))]
        for k, v in x.items():
            out += [enc(k)] + spec(v)
        return out
    if isinstance(x, Node):
        aux = "-" if x.aux is None else enc(x.aux)
        return ["node", aux, str(len(x.children))] + [t for c in x.children for t in spec(c)]
    if isinstance(x, Box):
        return ["box", str(x.scale), str(len(x.children))] + [
            t for c in x.children for t in spec(c)]
    if isinstance(x, Linear):
        return ["data", "Linear", "1", enc(x.name), "2"] + spec(x.w) + spec(x.b)
    if isinstance(x, Point):
        return ["data", "Point", "0", "2"] + spec(x.x) + spec(x.y)
    raise TypeError(type(x))


IS_LEAF = {
    "-": None,
    "none": lambda x: x is None,
    "tuple": lambda x: isinstance(x, tuple),
    "Linear": lambda x: isinstance(x, Linear),
}

CASES = [
    ("leaf", 7),
    ("none", None),
    ("empty_tuple", ()),
    ("empty_list", []),
    ("empty_dict", {}),
    ("one_tuple", (3,)),
    ("pair_with_none", (0, None)),
    ("dict_unsorted", {"w": 0, "b": [1, 2]}),
    ("nested_sequences", (0, [1, None, (2,)], None, [[3], [], (4, 5)])),
    ("dict_key_order", {"b": 0, "B": 1, "a": 2, "10": 3, "9": 4, "": 5, "a b": 6, "_x": 7,
                        "é": 8, "Z": 9}),
    ("dict_quotes", {"it's": 0, 'say "hi"': 1, "both'\"": 2, "back\\slash": 3,
                     "tab\tnew\nline": 4}),
    ("nested_dicts", {"params": {"w": 0, "b": 1},
                      "opt": {"mu": {"w": 2, "b": 3}, "count": 4}, "step": None}),
    ("dataclass_meta", Linear(w=0, b=[1, 2], name="lin")),
    ("dataclass_plain", Point(x=(0, 1), y={"z": 2, "a": None})),
    ("node_str_aux", Node(0, {"x": 1}, aux="hello")),
    ("node_none_aux", Node(0, 1, aux=None)),
    ("node_empty", Node(aux="e")),
    ("node_nested", [Node(Node(0, aux="in"), None, aux="out"), {"k": Node(1, aux=None)}]),
    ("box", Box(0, [1, 2], scale=3)),
    ("model", {"layers": [Linear(w=0, b=1, name="l0"), Linear(w=2, b=3, name="l1")],
               "head": Node(Point(x=4, y=5), aux="head"), "scale": Box(6, scale=-2),
               "extra": (None, [7])}),
    ("is_leaf_none", ([0, None], {"a": None, "b": 1})),
    ("is_leaf_tuple", [0, (1, 2), {"t": (3, (4,)), "u": 5}]),
    ("is_leaf_linear", {"l": Linear(w=0, b=[1], name="a"), "m": [Linear(w=2, b=3, name="b")]}),
]
CASE_IS_LEAF = {"is_leaf_none": "none", "is_leaf_tuple": "tuple",
                "is_leaf_linear": "Linear"}

MAPS = [
    ("same", {"w": 0, "b": [1, 2]}, {"b": [10, 11], "w": 12}),
    ("prefix", [0, 1, {"a": 2}], [(10, 11), None, {"a": [12, {"q": 13}]}]),
    ("prefix_custom", {"l": 0, "n": Node(1, aux="x")},
     {"l": Linear(w=10, b=11, name="z"), "n": Node([12], aux="x")}),
    ("dict_keys", {"a": {"b": 0, "w": 1}}, {"a": {"b": 10, "x": 11}}),
    ("list_length", [0, 1], [10, 11, 12]),
    ("tuple_vs_list", [0, (1, 2)], [10, [11, 12]]),
    ("none_vs_leaf", [0, [1, None]], [10, [11, 12]]),
    ("root_kind", (0, 1), [10, 11]),
    ("deep_none", {"a": [0, {"c": None}]}, {"a": [10, {"c": (1,)}]}),
    ("node_aux", [Node(0, aux="x")], [Node(10, aux="y")]),
    ("dataclass_meta", Linear(w=0, b=1, name="p"), Linear(w=10, b=11, name="q")),
    ("node_vs_box", [Node(0, aux="x")], [Box(10, scale=1)]),
]


class Result:
    """f's result in a tree map: a leaf JAX will not look into."""

    def __init__(self, a, b):
        self.a, self.b = a, b


def case_lines(name, tree):
    pred = CASE_IS_LEAF.get(name, "-")
    is_leaf = IS_LEAF[pred]
    leaves_paths, treedef = tu.tree_flatten_with_path(tree, is_leaf=is_leaf)
    lines = [f"case {name}", f"is_leaf {pred}", "build " + " ".join(spec(tree)),
             f"treedef {treedef}", f"num_leaves {treedef.num_leaves}",
             f"num_nodes {treedef.num_nodes}"]
    for path, leaf in leaves_paths:
        label = str(leaf) if isinstance(leaf, int) else "T:" + enc(str(tu.tree_structure(leaf)))
        lines.append(f"leaf {label} {tu.keystr(path)}")
    lines.append("end")
    return lines


def map_lines(name, t0, t1):
    lines = [f"map {name}", "tree0 " + " ".join(spec(t0)), "tree1 " + " ".join(spec(t1))]
    try:
        out = jax.tree.map(lambda a, b: Result(a, str(tu.tree_structure(b))), t0, t1)
    except ValueError as e:
        m = re.search(r"at key path\n    tree_map tree(.*)\n", str(e))
        assert m, str(e)
        lines.append(f"mismatch {m.group(1)}".rstrip())
    else:
        for r in tu.tree_leaves(out):
            lines.append(f"match {r.a} {enc(r.b)}")
    lines.append("end")
    return lines


def main():
    lines = [f"# pytrees as JAX {jax.__version__} flattens them; see trees.py for the format"]
    for name, tree in CASES:
        lines += case_lines(name, tree)
    for name, t0, t1 in MAPS:
        lines += map_lines(name, t0, t1)
    with open(os.path.join(HERE, "trees.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

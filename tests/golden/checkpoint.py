#!/usr/bin/env python3
"""Golden data for tests/data/test_data_checkpoint.cc: safetensors files written
by Python's `safetensors` package (its numpy API), which kiln must restore.

Writes, for the tree

  {'key': u32[2], 'opt': [{'mu': f64[2]}], 'params': {'b': i64[3], 'w': f32[2,3]},
   'step': i32[]}

with tensors named by jax.tree_util.keystr of their paths (values listed in
the test):

  checkpoint_py.safetensors      plain, as any safetensors writer leaves it
                                 (no checksums: kiln loads it unchecked)
  checkpoint_py_crc.safetensors  with kiln's checksum metadata computed here,
                                 by Python's zlib.crc32 of each tensor's
                                 bytes: {"crc32:<name>": "%08x"}, so kiln's
                                 check of a CRC-32 agrees with zlib's

Run from anywhere: python3 tests/golden/checkpoint.py
"""
import os
import zlib

import jax
import numpy as np
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))

tree = {
    "params": {"w": np.arange(6, dtype=np.float32).reshape(2, 3) * 0.25 - 1,
               "b": np.array([-3, 0, 2**40], dtype=np.int64)},
    "opt": [{"mu": np.array([1e-300, -2.5], dtype=np.float64)}],
    "step": np.array(7, dtype=np.int32),
    "key": np.asarray(jax.random.PRNGKey(42), dtype=np.uint32),
}
flat = {jax.tree_util.keystr(p): np.asarray(v)
        for p, v in jax.tree_util.tree_flatten_with_path(tree)[0]}
save_file(flat, os.path.join(HERE, "checkpoint_py.safetensors"), metadata={"writer": "python"})

crcs = {"crc32:" + k: "%08x" % zlib.crc32(np.ascontiguousarray(v).tobytes())
        for k, v in flat.items()}
save_file(flat, os.path.join(HERE, "checkpoint_py_crc.safetensors"),
          metadata={"writer": "python", **crcs})

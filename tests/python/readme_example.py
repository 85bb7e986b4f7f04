import numpy as np
import jax.numpy as jnp
import kiln

@kiln.jit
def predict(params, x):
    return jnp.tanh(x @ params["w"] + params["b"])

params = {"w": np.ones((3, 2), np.float32), "b": np.zeros(2, np.float32)}
y = predict(params, x=np.arange(6, dtype=np.float32).reshape(2, 3))
print(y)           # a kiln.Array, computed by kiln
print(y[1] * 2)    # operators and indexing run on kiln's device too
print(np.asarray(y).sum())

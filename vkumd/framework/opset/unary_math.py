"""The unary math set, each a generated elementwise kernel (float32, float16 and bfloat16,
computed in float32 and rounded once): abs, neg, ceil, floor, round (half to even), sign,
reciprocal, log, the trigonometric and hyperbolic functions and their inverses.

The GLSL forms are ``shaders/include/activation.glsl``'s where the driver's built-in would
lose float32 accuracy: log near 1 (the built-in is bounded only in absolute error there),
sinh near 0 (cancellation) and near its overflow, the inverse hyperbolics (cancellation and
x^2's overflow), and asin, acos and atan (the drivers' are fits to about 1e-5). sin, cos and
tan are the driver's.
"""

from __future__ import annotations

import numpy as np

from vkumd.framework.opset.activation import _math

_math("abs", np.abs, "abs({a})", "``|x|`` elementwise.")
_math("neg", np.negative, "(-{a})", "``-x`` elementwise.")
_math("ceil", np.ceil, "ceil({a})", "The smallest integer >= x, elementwise.")
_math("floor", np.floor, "floor({a})", "The largest integer <= x, elementwise.")
_math("round", np.round, "roundEven({a})",
      "x rounded to the nearest integer, halves to even (as ONNX's Round and numpy).")
_math("sign", np.sign, "vkumd_sign({a})", "-1, 0 or 1 by the sign of x (NaN stays NaN).")
_math("reciprocal", lambda x: 1.0 / x, "(1.0 / {a})", "``1 / x`` elementwise.")
_math("log", np.log, "vkumd_log({a})", "The natural logarithm of x (NaN below 0).")
_math("sin", np.sin, "sin({a})", "The sine of x (radians) elementwise.")
_math("cos", np.cos, "cos({a})", "The cosine of x (radians) elementwise.")
_math("tan", np.tan, "tan({a})", "The tangent of x (radians) elementwise.")
_math("asin", np.arcsin, "vkumd_asin({a})", "The arcsine of x (NaN outside [-1, 1]).")
_math("acos", np.arccos, "vkumd_acos({a})", "The arccosine of x (NaN outside [-1, 1]).")
_math("atan", np.arctan, "vkumd_atan({a})", "The arctangent of x elementwise.")
_math("sinh", np.sinh, "vkumd_sinh({a})", "The hyperbolic sine of x elementwise.")
_math("cosh", np.cosh, "vkumd_cosh({a})", "The hyperbolic cosine of x elementwise.")
_math("asinh", np.arcsinh, "vkumd_asinh({a})", "The inverse hyperbolic sine of x.")
_math("acosh", np.arccosh, "vkumd_acosh({a})",
      "The inverse hyperbolic cosine of x (NaN below 1).")
_math("atanh", np.arctanh, "vkumd_atanh({a})",
      "The inverse hyperbolic tangent of x (NaN outside [-1, 1]).")

"""Black-Scholes option prices, written as a plain NumPy program.

The only change from the NumPy version is the import: ``import dgvm.array as np``. Every
line is elementwise work on arrays that live on the workers.
"""

import numpy

import dgvm.array as np  # the NumPy version: import numpy as np

from _common import check, cluster, parse


def normal_cdf(x, np=np):
    # Abramowitz & Stegun 7.1.26 for erf (|error| < 1.5e-7).
    z = np.abs(x) / numpy.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-z * z)
    return 0.5 * (1.0 + np.where(x >= 0, erf, -erf))


def black_scholes(n=1_000_000, chunk=250_000, rate=0.02, vol=0.3, np=np):
    kw = {"chunks": chunk} if np is not numpy else {}
    price = np.linspace(10.0, 50.0, n, **kw)
    strike = np.linspace(40.0, 10.0, n, **kw)
    years = np.linspace(0.25, 2.0, n, **kw)
    sd = vol * np.sqrt(years)
    d1 = (np.log(price / strike) + (rate + 0.5 * vol * vol) * years) / sd
    d2 = d1 - sd
    discount = np.exp(-rate * years)
    call = price * normal_cdf(d1, np) - strike * discount * normal_cdf(d2, np)
    put = strike * discount * normal_cdf(-d2, np) - price * normal_cdf(-d1, np)
    return (np.asnumpy(call), np.asnumpy(put)) if np is not numpy else (call, put)


def run(n=1_000_000, chunk=250_000) -> float:
    call, put = black_scholes(n, chunk)
    want_call, want_put = black_scholes(n, chunk, np=numpy)
    return float(max(numpy.abs(call - want_call).max(), numpy.abs(put - want_put).max()))


if __name__ == "__main__":
    args = parse(__doc__.splitlines()[0], n=1_000_000, chunk=250_000)
    with cluster(args):
        check("black_scholes", run(args.n, args.chunk), 1e-9)

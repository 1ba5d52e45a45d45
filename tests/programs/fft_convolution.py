"""Smoothing a noisy signal by convolution through the FFT, and its spectrum's peak."""

import numpy


def inputs(rng):
    t = numpy.linspace(0.0, 1.0, 1024, endpoint=False)
    signal = numpy.sin(2 * numpy.pi * 50 * t) + 0.5 * rng.standard_normal(1024)
    return {"signal": signal}


def run(np, data):
    x = np.asarray(data["signal"])
    n = x.shape[0]
    kernel = np.zeros(n)
    kernel[:9] = 1.0 / 9.0          # a 9-point moving average
    smooth = np.fft.irfft(np.fft.rfft(x) * np.fft.rfft(kernel), n)
    spectrum = np.abs(np.fft.rfft(x)) ** 2
    freqs = np.fft.rfftfreq(n, d=1.0 / n)
    peak = np.argmax(spectrum[1:]) + 1
    print("dominant frequency", freqs[peak])
    print(f"smoothed variance {smooth.var():.8f} vs raw {x.var():.8f}")
    centred = np.fft.fftshift(np.fft.fft(x))
    print("energy", np.sum(np.abs(centred) ** 2) / n)
    return {"smooth": smooth, "spectrum": spectrum}

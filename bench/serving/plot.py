"""PNG charts: matplotlib when it is importable, else a small built-in writer (zlib + struct).

chart(path, title, panels): panels stacked vertically, each
  {"ylabel": str, "xlabel": str, "log_y": bool, "hline": float|None,
   "series": [{"label": str, "x": [..], "y": [..], "dots": bool}]}
Returns "matplotlib" or "builtin" (which renderer drew it).
"""
import math
import struct
import zlib

COLORS = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (255, 127, 14), (148, 103, 189),
          (140, 86, 75)]

FONT = {  # 3x5 glyphs, rows top to bottom
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001010010010",
    "8": "111101111101111", "9": "111101111001111", ".": "000000000000010", "/": "001001010100100",
    "-": "000000111000000", ":": "000010000010000", " ": "000000000000000", "%": "101001010100101",
    "(": "010100100100010", ")": "010001001001010", "=": "000111000111000", "X": "101101010101101",
    "A": "010101111101101", "B": "110101110101110", "C": "011100100100011", "D": "110101101101110",
    "E": "111100110100111", "F": "111100110100100", "G": "011100101101011", "H": "101101111101101",
    "I": "111010010010111", "K": "101101110101101", "L": "100100100100111", "M": "101111111101101",
    "N": "110101101101101", "O": "010101101101010", "P": "110101110100100", "Q": "010101101110011",
    "R": "110101110101101", "S": "011100010001110", "T": "111010010010010", "U": "101101101101111",
    "V": "101101101101010", "W": "101101111111101", "Y": "101101010010010", "Z": "111001010100111",
    "J": "001001001101010", "_": "000000000000111", ",": "000000000010100", "<": "001010100010001",
    ">": "100010001010100", "+": "000010111010000",
}


class Canvas:
    """An RGB raster with dots, lines and 3x5-glyph text, written as PNG (also used by
    bench/run_autoscaling.py)."""

    def __init__(self, w, h):
        self.w, self.h = w, h
        self.px = bytearray(b"\xff" * (w * h * 3))

    def dot(self, x, y, c):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.px[i:i + 3] = bytes(c)

    def line(self, x0, y0, x1, y1, c, width=1):
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        while True:
            for o in range(width):
                self.dot(x0, y0 + o, c)
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def text(self, x, y, s, c=(0, 0, 0), scale=2):
        for ch in s.upper():
            g = FONT.get(ch, FONT[" "])
            for r in range(5):
                for k in range(3):
                    if g[r * 3 + k] == "1":
                        for a in range(scale):
                            for b in range(scale):
                                self.dot(x + k * scale + a, y + r * scale + b, c)
            x += 4 * scale

    def png(self):
        raw = b"".join(b"\x00" + bytes(self.px[y * self.w * 3:(y + 1) * self.w * 3])
                       for y in range(self.h))

        def chunk(kind, data):
            return (struct.pack(">I", len(data)) + kind + data
                    + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
        return (b"\x89PNG\r\n\x1a\n"
                + chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def _fmt(v):
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 1:
        return f"{v:.1f}"
    return f"{v:.3g}"


def _clean(xs, ys, log_y):
    return [(x, y) for x, y in zip(xs, ys)
            if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)
            and (y > 0 or not log_y)]


def _builtin(path, title, panels):
    W, left, right, top, gap, ph = 900, 80, 20, 40, 50, 200
    H = top + len(panels) * (ph + gap) + 10
    cv = Canvas(W, H)
    cv.text(left, 10, title, scale=2)
    for i, p in enumerate(panels):
        y0 = top + i * (ph + gap)
        log_y = p.get("log_y", False)
        pts = [pt for s in p["series"] for pt in _clean(s["x"], s["y"], log_y)]
        ys = [y for _, y in pts] + ([p["hline"]] if p.get("hline") else [])
        xs = [x for x, _ in pts] or [0, 1]
        xmin, xmax = min(xs), max(xs)
        if xmax == xmin:
            xmin, xmax = xmin - 0.5, xmax + 0.5
        fy = (lambda v: math.log10(v)) if log_y else (lambda v: v)
        if ys:
            ymin = min(fy(y) for y in ys) if log_y else min(0.0, min(ys))
            ymax = max(fy(y) for y in ys)
        else:
            ymin, ymax = 0.0, 1.0
        if ymax <= ymin:
            ymax = ymin + 1
        ymax += (ymax - ymin) * 0.08

        def xy(x, y):
            return (left + int((W - left - right - 1) * (x - xmin) / (xmax - xmin)),
                    y0 + ph - int(ph * (fy(y) - ymin) / (ymax - ymin)))
        for x in range(left, W - right):
            cv.dot(x, y0 + ph, (0, 0, 0))
        for y in range(y0, y0 + ph + 1):
            cv.dot(left, y, (0, 0, 0))
        cv.text(left + 8, y0 - 14, p.get("ylabel", ""))
        top_v = 10 ** ymax if log_y else ymax
        bot_v = 10 ** ymin if log_y else ymin
        cv.text(2, y0, _fmt(top_v))
        cv.text(2, y0 + ph - 10, _fmt(bot_v))
        cv.text(left, y0 + ph + 6, _fmt(xmin))
        cv.text(W - right - 60, y0 + ph + 6, _fmt(xmax))
        cv.text(left + 200, y0 + ph + 6, p.get("xlabel", ""))
        if p.get("hline"):
            hy = xy(xmin, p["hline"])[1]
            for x in range(left, W - right, 8):
                cv.line(x, hy, x + 3, hy, (120, 120, 120), width=2)
        lx = W - right - 260
        for k, s in enumerate(p["series"]):
            c = COLORS[k % len(COLORS)]
            cv.text(lx, y0 + 4 + 14 * k, s.get("label", ""), c)
            prev = None
            for x, y in _clean(s["x"], s["y"], log_y):
                q = xy(x, y)
                for a in (-1, 0, 1):
                    for b in (-1, 0, 1):
                        cv.dot(q[0] + a, q[1] + b, c)
                if prev and not s.get("dots"):
                    cv.line(prev[0], prev[1], q[0], q[1], c, width=2)
                prev = q
    with open(path, "wb") as f:
        f.write(cv.png())
    return "builtin"


def chart(path, title, panels):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return _builtin(path, title, panels)
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 3.2 * len(panels)), squeeze=False)
    for ax, p in zip(axes[:, 0], panels):
        for s in p["series"]:
            pts = _clean(s["x"], s["y"], p.get("log_y", False))
            ax.plot([x for x, _ in pts], [y for _, y in pts], "o" if s.get("dots") else "o-",
                    ms=3, label=s.get("label"))
        if p.get("hline"):
            ax.axhline(p["hline"], color="grey", ls="--")
        if p.get("log_y"):
            ax.set_yscale("log")
        ax.set_ylabel(p.get("ylabel", ""))
        ax.set_xlabel(p.get("xlabel", ""))
        if any(s.get("label") for s in p["series"]):
            ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return "matplotlib"

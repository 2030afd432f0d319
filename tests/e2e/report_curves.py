"""report_curves.py - a report's plots read back as a person reads them, for report.py and
tensorboard.py: each chart's polylines turned back into values through the numbers written on
its axes (two tick labels and their positions per axis), then compared with metrics.jsonl.

The points are written to 0.1 px, and so are the ticks, so a value read back is within a few
tenths of a pixel of the true one: TOL_PX pixels, converted to each chart's own units.
"""
import json
import math
import re
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"
TOL_PX = 0.3
SINGLES = {"learning rate": "lr", "gradient norm": "grad_norm",
           "throughput (samples/s)": "samples_per_sec"}


def inline_svgs(html):
    """Every <svg> of a page, parsed (the page leaves out the namespace, as HTML may)."""
    out = []
    for s in re.findall(r"<svg .*?</svg>", html, flags=re.S):
        out.append(ET.fromstring(s.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1)))
    return out


def _axis(kids, cls, coord, log):
    """(pixel -> value, value per pixel) from the first and last tick of an axis."""
    ticks = []
    for i, el in enumerate(kids):
        if el.tag == NS + "line" and el.get("class") == cls and i + 1 < len(kids):
            v = float(kids[i + 1].text)
            ticks.append((float(el.get(coord)), math.log10(v) if log else v))
    if len(ticks) < 2:
        return None, None
    (p0, v0), (p1, v1) = ticks[0], ticks[-1]
    per_px = (v1 - v0) / (p1 - p0)
    return (lambda px: v0 + (px - p0) * per_px), abs(per_px)


def read_chart(svg):
    """{title, by_epoch, log, curves: {name: [(x, y)]}, xres, yres} or None for a heat map."""
    kids = list(svg)
    if svg.find(NS + "polyline") is None:
        return None
    title = svg.find(NS + "title").text
    log = any(t.text and t.text.endswith("(log scale)") for t in svg.iter(NS + "text"))
    fx, xres = _axis(kids, "xtick", "x1", False)
    fy, yres = _axis(kids, "ytick", "y1", log)
    chart = {"title": title, "by_epoch": title.endswith(" by epoch"), "log": log, "curves": {},
             "xres": xres, "yres": yres}
    if fx is None or fy is None:
        return chart
    for i, el in enumerate(kids):
        if el.tag != NS + "polyline":
            continue
        name = next(k.text for k in kids[i + 1:] if k.tag == NS + "text")  # its legend entry
        pts = []
        for xy in el.get("points").split():
            px, py = (float(c) for c in xy.split(","))
            y = fy(py)
            pts.append((fx(px), 10 ** y if log else y))
        chart["curves"][name] = pts
    return chart


def recorded(metrics_path):
    """{name: [(step, epoch, value)]} of metrics.jsonl, the epoch fractional: a record's step
    placed between the steps at which epochs ended, as the records' `epoch` field (the epoch
    from 1 of the record's step) shows them: an epoch ended at its last record once a record of
    a later epoch follows."""
    recs = [json.loads(line) for line in open(metrics_path)]
    ends = []  # ends[k]: the step at which epoch k + 1 had ended
    last_epoch, last_step = 0, 0
    for r in recs:
        if r["epoch"] > last_epoch:
            end = last_step if last_epoch > 0 else r["step"]
            while len(ends) < r["epoch"] - 1:
                ends.append(max(end, ends[-1]) if ends else end)
            last_epoch = r["epoch"]
        if r["epoch"] == last_epoch:
            last_step = r["step"]

    def epoch_of(step):
        start = 0
        for k, end in enumerate(ends):
            if step <= end:
                return k + (step - start) / (end - start) if end > start else k + 1
            start = end
        pace = ends[-1] - (ends[-2] if len(ends) > 1 else 0) if ends else 0
        return len(ends) + (step - start) / pace if pace > 0 else float("nan")

    out = {}
    for r in recs:
        for k, v in r.items():
            if k in ("step", "epoch", "time") or v is None or "/confusion/" in k:
                continue
            out.setdefault(k, []).append((r["step"], epoch_of(r["step"]), v))
    return out


def compare(html, metrics_path):
    """Problems found (empty when every curve holds exactly metrics.jsonl's values), and the
    number of points compared. Every series must be drawn against the step, and every loss or
    metric also against the epoch once an epoch has ended."""
    want = recorded(metrics_path)
    problems, n_points, seen = [], 0, set()
    for svg in inline_svgs(html):
        chart = read_chart(svg)
        if chart is None:
            continue
        title = chart["title"]
        if not chart["curves"]:
            problems.append(f"{title}: no axis ticks to read values through")
            continue
        for name, pts in chart["curves"].items():
            seen.add((name, chart["by_epoch"]))
            rec = want.get(name)
            if rec is None:
                problems.append(f"{title}: '{name}' is not in metrics.jsonl")
                continue
            if chart["log"]:
                rec = [r for r in rec if r[2] > 0]
            if len(pts) != len(rec):
                problems.append(f"{title}: '{name}' has {len(pts)} points, {len(rec)} recorded")
                continue
            for (x, y), (step, epoch, v) in zip(pts, rec):
                wx = epoch if chart["by_epoch"] else step
                ytol = TOL_PX * chart["yres"] * (abs(v) * math.log(10) if chart["log"] else 1)
                if abs(x - wx) > TOL_PX * chart["xres"] or abs(y - v) > ytol:
                    problems.append(f"{title}: '{name}' point ({x:.6g}, {y:.6g}), recorded "
                                    f"({wx:.6g}, {v:.6g}) (tolerance {TOL_PX} px)")
                    break
                n_points += 1
    has_epochs = any(not math.isnan(e) for rec in want.values() for _, e, _ in rec)
    for name in want:
        if (name, False) not in seen:
            problems.append(f"'{name}' is drawn against no step axis")
        if has_epochs and name not in SINGLES.values() and (name, True) not in seen:
            problems.append(f"'{name}' is drawn against no epoch axis")
    return problems, n_points

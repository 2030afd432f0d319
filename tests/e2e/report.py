"""report.py - the run report checked as a reader would: `ctrain fit` with a confusion metric
writes report.html; every inline SVG parses as XML and each curve, read back through its axes'
tick labels (report_curves.py), holds the values of metrics.jsonl, against the step and, for
losses and metrics, against the epoch; `ctrain report --svg` writes standalone SVG files that
parse (and --log ones that read back too); `ctrain report RUN RUN2` compares two runs on one
page whose curves read back as each run's values (the run by the curve's colour, the split by
its dash); a live report (logging.report: live) written by
the first evaluation already marks that evaluation's step as the best checkpoint's, although the
trainer saves that checkpoint after the report is written; and a headless Chromium screenshot
of the page and of the comparison, decoded here (zlib, no imaging library), has enough non-white pixels not to be
blank. Without Debian's chromium (scripts/install-deps.sh installs it) every other check runs
and the script exits 77, ctest's skip, with a message: never a silent pass.
Usage: /usr/bin/python3 report.py PATH/TO/ctrain
"""
import glob
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib
import xml.etree.ElementTree as ET

import report_curves

CTRAIN = os.path.abspath(sys.argv[1])
PASSED = FAILED = 0
SKIPPED = False


def check(name, cond, why=""):
    global PASSED, FAILED
    if cond:
        PASSED += 1
        print(f"ok   {name}")
    else:
        FAILED += 1
        print(f"FAIL {name}: {why}")


# The epoch placement the curve checks rely on, worked by hand: epochs of 10 steps, the third
# under way, so step 5 is epoch 0.5, step 15 epoch 1.5 and step 25 (past the last end) 2.5.
with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as _f:
    for _step, _epoch in ((5, 1), (10, 1), (15, 2), (20, 2), (25, 3)):
        _f.write(json.dumps({"step": _step, "epoch": _epoch, "train/loss": 1.0}) + "\n")
_placed = [e for _, e, _ in report_curves.recorded(_f.name)["train/loss"]]
os.unlink(_f.name)
check("epochs placed between the recorded epoch ends", _placed == [0.5, 1.0, 1.5, 2.0, 2.5],
      f"got {_placed}")

CONFIG = """
seed: 1
data:
  train: {type: synthetic, kind: blobs, n: 800, features: 8, classes: 4, seed: 3}
  valid: {split: 0.25}
  test: {type: synthetic, kind: blobs, n: 200, features: 8, classes: 4, seed: 3}
  batch_size: 32
model: {type: mlp, hidden: [16]}
optimizer: {type: sgd, lr: 0.1, momentum: 0.9}
trainer: {max_epochs: 3, steps_per_loop: 5}
metrics:
  valid: [accuracy, confusion]
checkpoint: {monitor: valid/acc}
logging: {progress: none}
"""

SVG = "{http://www.w3.org/2000/svg}"

# long epochs (2,000,000 samples: seconds each), so the first evaluation's live report can be
# read before the second evaluation replaces it
LIVE = """
seed: 1
data:
  train: {type: synthetic, kind: blobs, n: 2000000, features: 8, classes: 4, seed: 3}
  valid: {split: 0.005}
  batch_size: 64
model: {type: mlp, hidden: [16]}
optimizer: {type: sgd, lr: 0.1}
trainer: {max_epochs: 50, steps_per_loop: 1000}
checkpoint: {monitor: valid/acc}
logging: {progress: none, report: live}
"""


def check_live(tmp):
    """The live report of the first evaluation marks it as the best: the trainer weighs the
    evaluation and saves the best checkpoint only after the report is written, so the report
    takes the best step from the monitor, not from the `best` pointer (not there yet)."""
    with open(os.path.join(tmp, "live.yaml"), "w") as f:
        f.write(LIVE)
    html_path = os.path.join(tmp, "runs", "live", "report.html")
    proc = subprocess.Popen([CTRAIN, "fit", "live.yaml"], cwd=tmp, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    snap, deadline = None, time.time() + 120
    while snap is None and time.time() < deadline and proc.poll() is None:
        if os.path.exists(html_path):  # written whole and renamed: never half a page
            snap = open(html_path).read()
        time.sleep(0.01)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=120)[1]
    check("live: report.html after the first evaluation", snap is not None, err[-300:])
    if snap is None:
        return
    best = re.search(r"Best checkpoint: step (\d+)", snap)
    row = re.search(r'<td style="text-align:left">valid/acc</td><td>[^<]*</td><td>(\d+)</td>',
                    snap)
    acc = [report_curves.read_chart(s) for s in report_curves.inline_svgs(snap)]
    n_evals = [len(c["curves"]["valid/acc"]) for c in acc
               if c and c["title"] == "acc" and "valid/acc" in c["curves"]]
    check("live: the first evaluation's report holds that one evaluation", n_evals == [1],
          f"valid/acc points {n_evals}")
    check("live: ...and marks its step as the best checkpoint's",
          best is not None and row is not None and best.group(1) == row.group(1) and
          'class="best"' in snap,
          f"best {best and best.group(1)}, valid/acc at step {row and row.group(1)}")


def read_comparison(html, runs):
    """Each comparison chart's curves read back as {(title, run, series): ([(x, y)], value of
    a pixel on x, on y)}: the run
    from the curve's colour and the split from its dash, as the legend's keys give them (a run
    in its colour, solid; a split in grey, in its dash); and the problems found."""
    out, problems = {}, []
    for svg in report_curves.inline_svgs(html):
        kids = list(svg)
        if svg.find(SVG + "polyline") is None:
            continue
        title = svg.find(SVG + "title").text
        run_of, split_of = {}, {}
        for i, el in enumerate(kids):
            if el.tag == SVG + "text" and el.get("class") == "legend":
                line = kids[i - 1]
                if line.get("stroke") == "#555555":
                    split_of[line.get("stroke-dasharray")] = el.text
                else:
                    run_of[line.get("stroke")] = el.text
        fx, xres = report_curves._axis(kids, "xtick", "x1", False)
        fy, yres = report_curves._axis(kids, "ytick", "y1", False)
        base = title[:-len(" by epoch")] if title.endswith(" by epoch") else title
        for el in kids:
            if el.tag != SVG + "polyline":
                continue
            run = run_of.get(el.get("stroke"))
            if run not in runs:
                problems.append(f"{title}: a curve in {el.get('stroke')}, no run's colour")
                continue
            single = report_curves.SINGLES.get(base)
            name = single or f"{split_of.get(el.get('stroke-dasharray'))}/{base}"
            pts = [tuple(float(c) for c in xy.split(",")) for xy in el.get("points").split()]
            out[(title, run, name)] = ([(fx(px), fy(py)) for px, py in pts], xres, yres)
    return out, problems


def check_compare(tmp, run):
    """`ctrain report RUN RUN2`: one page, report.html in the current directory, whose curves
    read back as each run's metrics.jsonl (by step and by epoch), with the runs named and the
    configuration key that differs; a screenshot of it that is not blank."""
    p = subprocess.run([CTRAIN, "fit", "exp.yaml", "++output_dir=runs/exp2", "optimizer.lr=0.05",
                        "trainer.max_epochs=4"], cwd=tmp, capture_output=True, text=True)
    check("compare: a second run", p.returncode == 0, p.stderr[-400:])
    p = subprocess.run([CTRAIN, "report", run, os.path.join(tmp, "runs", "exp2")], cwd=tmp,
                       capture_output=True, text=True)
    html_path = os.path.join(tmp, "report.html")
    check("compare: ctrain report RUN RUN2 writes report.html in the current directory",
          p.returncode == 0 and os.path.exists(html_path) and "wrote report.html" in p.stderr,
          p.stderr)
    if not os.path.exists(html_path):
        return None
    html = open(html_path).read()
    runs = {"exp": os.path.join(run, "metrics.jsonl"),
            "exp2": os.path.join(tmp, "runs", "exp2", "metrics.jsonl")}
    curves, problems = read_comparison(html, runs)
    n = 0
    for (title, label, name), (pts, xres, yres) in curves.items():
        rec = report_curves.recorded(runs[label]).get(name)
        if rec is None or len(rec) != len(pts):
            problems.append(f"{title}: {label} {name}: {len(pts)} points, "
                            f"{rec and len(rec)} recorded")
            continue
        for (x, y), (step, epoch, v) in zip(pts, rec):
            wx = epoch if title.endswith(" by epoch") else step
            tol = report_curves.TOL_PX
            if abs(x - wx) > tol * xres or abs(y - v) > tol * yres:
                problems.append(f"{title}: {label} {name} ({x:.4g}, {y:.4g}), recorded "
                                f"({wx:.4g}, {v:.4g})")
                break
            n += 1
    seen = {(label, name) for _, label, name in curves}
    check("compare: every curve of both runs holds its metrics.jsonl's values",
          not problems and ("exp", "valid/acc") in seen and ("exp2", "test/loss") in seen and
          ("exp2", "lr") in seen, "; ".join(problems[:4]) + f" ({n} points)")
    check("compare: the key that differs, with each run's value",
          '<td style="text-align:left">optimizer.lr</td><td style="text-align:left">0.1</td>'
          '<td style="text-align:left">0.05</td>' in html and
          "keys equal in all runs</summary>" in html, "")
    return html_path


def png_rows(path):
    """(width, height, bytes per pixel, rows) of an 8-bit non-interlaced PNG (what Chromium
    writes): the IDAT chunks inflated and each row's filter (none, sub, up, average, Paeth)
    undone, as the PNG specification defines them."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    i, idat, head = 8, [], None
    while i + 8 <= len(data):
        n, kind = struct.unpack(">I4s", data[i:i + 8])
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", data[i + 8:i + 8 + n])
        elif kind == b"IDAT":
            idat.append(data[i + 8:i + 8 + n])
        elif kind == b"IEND":
            break
        i += 12 + n
    w, h, depth, ctype, _, _, interlace = head
    if depth != 8 or interlace or ctype not in (0, 2, 4, 6):
        raise ValueError(f"PNG of depth {depth}, colour type {ctype}, interlace {interlace}")
    bpp = {0: 1, 2: 3, 4: 2, 6: 4}[ctype]
    raw = zlib.decompress(b"".join(idat))
    stride = w * bpp
    prev, rows = bytearray(stride), []
    for y in range(h):
        f = raw[y * (stride + 1)]
        cur = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for x in range(bpp, stride):
                cur[x] = (cur[x] + cur[x - bpp]) & 0xFF
        elif f == 2:
            cur = bytearray((a + b) & 0xFF for a, b in zip(cur, prev))
        elif f == 3:
            for x in range(stride):
                left = cur[x - bpp] if x >= bpp else 0
                cur[x] = (cur[x] + ((left + prev[x]) >> 1)) & 0xFF
        elif f == 4:
            for x in range(stride):
                a = cur[x - bpp] if x >= bpp else 0
                b, c = prev[x], prev[x - bpp] if x >= bpp else 0
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                cur[x] = (cur[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(cur)
        prev = cur
    return w, h, bpp, rows


def non_white(path):
    """The share of a PNG's pixels that are not (nearly) white."""
    w, h, bpp, rows = png_rows(path)
    colour = range(min(bpp, 3)) if bpp != 2 else range(1)  # grey(+alpha) or RGB(+alpha)
    n = sum(1 for r in rows for x in range(0, w * bpp, bpp) if any(r[x + c] < 250 for c in colour))
    return n / (w * h)


def screenshot(chromium, html_path, shot):
    """The share of non-white pixels of headless Chromium's screenshot of a page, and what went
    wrong (Chromium's last words) when there is none."""
    p = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                        f"--screenshot={shot}", "--window-size=1000,1400", "file://" + html_path],
                       capture_output=True, text=True, timeout=120)
    share, why = 0.0, p.stderr[-300:]
    try:
        share = non_white(shot)
    except (OSError, ValueError, TypeError, zlib.error) as e:
        why = f"{e}; {why}"
    return share, why


def main():
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "exp.yaml"), "w") as f:
            f.write(CONFIG)
        p = subprocess.run([CTRAIN, "fit", "exp.yaml"], cwd=tmp, capture_output=True, text=True)
        check("fit", p.returncode == 0, p.stderr[-400:])
        run = os.path.join(tmp, "runs", "exp")
        html_path = os.path.join(run, "report.html")
        check("fit writes report.html", os.path.exists(html_path))
        if not os.path.exists(html_path):
            return
        html = open(html_path).read()
        check("no script, no network", "<script" not in html and "http://" not in
              html.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in html)
        svgs = re.findall(r"<svg .*?</svg>", html, flags=re.S)
        parsed = []
        for s in svgs:
            try:
                parsed.append(ET.fromstring(s.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1)))
            except ET.ParseError as e:
                check("inline svg parses", False, str(e))
        check("every inline SVG parses as XML", len(parsed) == len(svgs) and len(svgs) >= 5,
              f"{len(parsed)} of {len(svgs)}")
        # every curve read back against metrics.jsonl, by step and by epoch
        metrics = os.path.join(run, "metrics.jsonl")
        problems, n = report_curves.compare(html, metrics)
        n_values = sum(len(v) for v in report_curves.recorded(metrics).values())
        check("every curve holds metrics.jsonl's values, against the step and the epoch",
              not problems and n > n_values, "; ".join(problems[:4]) + f" ({n} points read)")
        titles = [s.find(f"{SVG}title").text for s in parsed]
        check("losses and metrics also against the epoch",
              "loss by epoch" in titles and "acc by epoch" in titles and
              "learning rate by epoch" not in titles, str(titles))
        check("the best checkpoint is marked", 'class="best"' in html)
        check("the resolved configuration as a table of keys and values",
              '<td style="text-align:left">optimizer.lr</td><td style="text-align:left">0.1</td>'
              in html and '>data.batch_size</td>' in html)
        # the last evaluation's and the best checkpoint's matrices: one table when they are
        # the same evaluation
        last = re.search(r"valid, last evaluation( = best checkpoint)? \(step (\d+)\)", html)
        best = re.search(r"Best checkpoint: step (\d+)", html)
        same = best is not None and last is not None and last.group(2) == best.group(1)
        check("confusion heat maps with precision and recall, one table when last = best",
              "Confusion: valid" in html and last is not None and
              (last.group(1) is not None) == same and
              html.count("<th>precision</th>") == (1 if same else 2) and
              ("valid, best checkpoint (step" in html) != same,
              f"last {last and last.group(0)}, best {best and best.group(1)}, "
              f"{html.count('<th>precision</th>')} tables")
        # ctrain report --svg: standalone files
        out = os.path.join(tmp, "r.html")
        svgdir = os.path.join(tmp, "svg")
        p = subprocess.run([CTRAIN, "report", run, "--output", out, "--svg", svgdir, "--log"],
                           capture_output=True, text=True)
        check("ctrain report", p.returncode == 0 and os.path.exists(out), p.stderr)
        files = glob.glob(os.path.join(svgdir, "*.svg"))
        # loss, acc, each by step and by epoch, learning rate, throughput
        ok = len(files) == 6 and os.path.exists(os.path.join(svgdir, "loss_by_epoch.svg"))
        for fn in files:
            try:
                ET.parse(fn)
            except ET.ParseError:
                ok = False
        check("--svg writes standalone SVG files that parse", ok, str(files))
        logged = open(out).read()
        problems, _ = report_curves.compare(logged, metrics)
        check("--log draws losses on a log scale, and they read back", "(log scale)" in logged
              and not problems, "; ".join(problems[:4]))
        p = subprocess.run([CTRAIN, "report", os.path.join(tmp, "nothere")], capture_output=True,
                           text=True)
        check("a directory without metrics.jsonl: exit 2 naming it",
              p.returncode == 2 and "metrics.jsonl" in p.stderr, p.stderr)
        check_live(tmp)
        compared = check_compare(tmp, run)
        chromium = shutil.which("chromium")
        if not chromium:
            global SKIPPED
            SKIPPED = True
            print("SKIP screenshot: Debian's chromium is not installed (scripts/install-deps.sh)")
        else:
            share, why = screenshot(chromium, html_path, os.path.join(tmp, "shot.png"))
            # a blank page has none; this one's tables and plots cover several percent
            check("headless chromium renders a page that is not blank (>= 2% non-white pixels)",
                  share >= 0.02, f"{share:.2%} non-white; {why}")
            if compared:
                share, why = screenshot(chromium, compared, os.path.join(tmp, "cmp.png"))
                check("headless chromium renders the comparison page, not blank (>= 2%)",
                      share >= 0.02, f"{share:.2%} non-white; {why}")
    print(f"report: {PASSED} passed, {FAILED} failed")


if __name__ == "__main__":
    main()
    sys.exit(1 if FAILED else 77 if SKIPPED else 0)

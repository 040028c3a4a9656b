#!/usr/bin/env python3
"""tests/render/run_tests.py — tests of `flamme svg` (the flame graph renderer).

Usage: python3 tests/render/run_tests.py build/flamme

Runs the real command on small folded inputs written here, parses the SVG
it writes (it must be well-formed XML) and checks what a user would see:
frame names, widths, order, colours, options, escaping of hostile names, and,
in headless Debian chromium, that clicking zooms and searching reports the
right "Matched" share. Expected numbers are computed here from the inputs.
chromium missing is a failure, not a skip (make deps installs it).
Prints "render: N passed, N failed" last; exits 1 if anything failed.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"
FLAMME = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/flamme")
TMP = tempfile.mkdtemp(prefix="flamme-render-")
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
results = []


def test(fn):
    results.append(fn)
    return fn


def write(name, text, mode="w"):
    path = os.path.join(TMP, name)
    with open(path, mode) as f:
        f.write(text)
    return path


def run(args, stdin=None, cwd=None, timeout=120):
    p = subprocess.run([FLAMME, "svg"] + args, input=stdin, capture_output=True, cwd=cwd or TMP,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def render(text, *opts, expect_rc=0):
    """Renders folded text; returns (svg root element, frames, stderr, raw bytes)."""
    src = write("in.folded", text, "wb" if isinstance(text, bytes) else "w")
    out = os.path.join(TMP, "out.svg")
    rc, _, err = run(list(opts) + [src, "-o", out])
    assert rc == expect_rc, "exit %d (want %d): %s" % (rc, expect_rc, err)
    raw = open(out, "rb").read()
    root = ET.fromstring(raw)
    return root, frames_of(root), err, raw


def frames_of(root):
    fr = root.find(".//%sg[@id='frames']" % NS)
    if fr is None:
        return []
    out = []
    for g in fr.findall(NS + "g"):
        title = g.find(NS + "title").text
        rect = g.find(NS + "rect")
        out.append({
            "name": title.split("\n")[0], "title": title,
            "s": float(g.get("s")), "n": float(g.get("n")), "m": float(g.get("m")),
            "d": int(g.get("d")), "elided": g.get("class") == "el",
            "x": float(rect.get("x")), "y": float(rect.get("y")), "w": float(rect.get("width")),
            "h": float(rect.get("height")), "fill": rect.get("fill"),
            "label": g.find(NS + "text").text or "",
        })
    return out


def find(frames, name, d=None):
    hits = [f for f in frames if f["name"] == name and (d is None or f["d"] == d)]
    assert len(hits) == 1, "want one frame %r at depth %s, got %d" % (name, d, len(hits))
    return hits[0]


def rgb(fill):
    return tuple(int(v) for v in re.match(r"rgb\((\d+),(\d+),(\d+)\)", fill).groups())


def check_widths_add_up(frames, max_depth=None):
    """Every frame's samples = self + the samples of its children."""
    for p in frames:
        if max_depth is not None and p["d"] > max_depth:
            continue
        ch = [c for c in frames if c["d"] == p["d"] + 1 and c["s"] >= p["s"] - 1e-9
              and c["s"] + c["n"] <= p["s"] + p["n"] + 1e-9]
        total = sum(c["n"] for c in ch) + p["m"]
        assert abs(total - p["n"]) <= 1e-6 * max(1, p["n"]), \
            "%s: %g != self %g + children %g" % (p["name"], p["n"], p["m"], total - p["m"])


# ------------------------------------------------------------- parsing


@test
def parse_spaces_decimals_duplicates():
    _, fr, _, _ = render("main;do some work;leaf one 2.5\nmain;x 1\nmain;do some work;leaf one 4\n"
                         "main;y 3.\n")
    assert find(fr, "all", 0)["n"] == 10.5
    assert find(fr, "do some work", 2)["n"] == 6.5      # frame with spaces, duplicates summed
    assert find(fr, "leaf one", 3)["m"] == 6.5
    assert find(fr, "y", 2)["n"] == 3.0                   # "3." is a count
    check_widths_add_up(fr)


@test
def parse_bad_lines_warn_with_file_and_line():
    path = write("bad.folded", "a;b 1\nno count here\n\na;c x\n 5\na;b 2\n")
    out = os.path.join(TMP, "bad.svg")
    rc, _, err = run([path, "-o", out])
    assert rc == 0, err
    assert "bad.folded:2:" in err and "bad.folded:4:" in err and "bad.folded:5:" in err, err
    assert "bad.folded:3:" not in err, "blank line must be ignored silently: " + err
    fr = frames_of(ET.parse(out).getroot())
    assert find(fr, "b", 2)["n"] == 3.0


@test
def parse_differential():
    root, fr, _, _ = render("main;grew 10 30\nmain;shrank 30 10\nmain;same 5 5\n")
    assert find(fr, "all", 0)["n"] == 45.0                 # widths from the second column
    r, g, b = rgb(find(fr, "grew", 2)["fill"])
    assert r == 255 and b < 255, find(fr, "grew", 2)["fill"]
    r, g, b = rgb(find(fr, "shrank", 2)["fill"])
    assert b == 255 and r < 255
    _, fr2, _, _ = render("main;grew 10 30\nmain;shrank 30 10\n", "--negate")
    assert rgb(find(fr2, "grew", 2)["fill"])[2] == 255      # negate swaps the hues


@test
def parse_stdin_and_merge_inputs():
    a = write("a.folded", "m;x 1\nm;y 2\n")
    b = write("b.folded", "m;x 4\n")
    rc, svg, err = run([a, b], )
    assert rc == 0, err
    fr = frames_of(ET.fromstring(svg))
    assert find(fr, "x", 2)["n"] == 5.0 and find(fr, "all", 0)["n"] == 7.0
    rc, svg, err = run([], stdin=b"m;x 1\nm;z 2\n")
    assert rc == 0, err
    assert find(frames_of(ET.fromstring(svg)), "z", 2)["n"] == 2.0


@test
def parse_empty_input_is_an_error():
    rc, svg, err = run([write("empty.folded", "garbage\n")])
    assert rc == 2 and "no valid input" in err.lower(), (rc, err)
    assert b"No valid input" in svg


@test
def parse_utf8_names():
    _, fr, _, _ = render("main;café_λ;日本 3\n".encode("utf-8"))
    assert find(fr, "日本", 3)["n"] == 3.0
    # invalid UTF-8 still yields well-formed XML (render() parses it)
    render(b"main;bad\xff\xfename 2\n")


@test
def parse_deep_and_wide_inputs():
    deep = ";".join(["rec"] * 12000)
    lines = [deep + " 500000", deep + ";leaf 1000"] + ["main;sib%06d 1" % i for i in range(100000)]
    _, fr, _, _ = render("\n".join(lines) + "\n", "--minwidth", "0.5")
    assert find(fr, "leaf", 12001)["n"] == 1000.0
    assert find(fr, "rec", 12000)["n"] == 501000.0
    assert max(f["d"] for f in fr) == 12001
    # 1 sample is < 0.5 px of 601,000 over 1180 px: all siblings become one "…"
    el = [f for f in fr if f["elided"]]
    assert len(el) == 1 and el[0]["n"] == 100000 and el[0]["d"] == 2
    assert not any(f["name"].startswith("sib") for f in fr)
    check_widths_add_up(fr, max_depth=3)


# ------------------------------------------------------------- options


@test
def option_inverted_puts_root_on_top():
    _, fr, _, _ = render("a;b;c 1\n")
    assert find(fr, "all")["y"] > find(fr, "c")["y"]
    root, fr, _, _ = render("a;b;c 1\n", "--inverted")
    assert find(fr, "all")["y"] < find(fr, "c")["y"]
    assert root.find(".//%stext[@id='title']" % NS).text == "Icicle Graph"


@test
def option_reverse_merges_leaves():
    _, fr, _, _ = render("a;b;c 1\nx;y;c 2\n", "--reverse")
    assert find(fr, "c", 1)["n"] == 3.0
    assert find(fr, "a", 3)["n"] == 1.0


@test
def option_flamechart_keeps_input_order():
    _, fr, _, _ = render("zeta 1\nalpha 1\n")
    assert find(fr, "alpha")["s"] < find(fr, "zeta")["s"]
    root, fr, _, _ = render("zeta 1\nalpha 1\nzeta 1\n", "--flamechart")
    z = [f for f in fr if f["name"] == "zeta"]
    assert len(z) == 2 and min(f["s"] for f in z) < find(fr, "alpha")["s"] < max(f["s"] for f in z)
    assert root.find(".//%stext[@id='title']" % NS).text == "Flame Chart"


@test
def option_minwidth_elides_and_adds_up():
    lines = ["main;big 1000"] + ["main;tiny%03d 1" % i for i in range(300)]
    root, fr, _, raw = render("\n".join(lines) + "\n", "--minwidth", "2")
    # 1300 samples over 1180 px: 1 sample < 2 px, so every tiny frame goes
    el = [f for f in fr if f["elided"]]
    assert len(el) == 1 and el[0]["n"] == 300 and el[0]["d"] == 2
    assert not any(f["name"].startswith("tiny") for f in fr)
    check_widths_add_up(fr)
    assert "300 frames narrower than 2 px" in root.find(".//%stext[@id='elided']" % NS).text
    _, fr, _, _ = render("\n".join(lines) + "\n", "--minwidth", "0")
    assert sum(1 for f in fr if f["name"].startswith("tiny")) == 300
    _, fr, _, _ = render("\n".join(lines) + "\n", "--minwidth", "50%")
    assert sorted(f["name"] for f in fr if f["d"] == 2) == ["big", "\u2026"]


@test
def option_texts_and_sizes():
    root, fr, _, raw = render("a;b 3\n", "--title", "My T", "--subtitle", "Sub", "--width", "800",
                              "--height", "20", "--fonttype", "Courier", "--fontsize", "10",
                              "--countname", "bytes", "--nametype", "Func:", "--notes", "hello")
    assert root.get("width") == "800"
    assert root.find(".//%stext[@id='title']" % NS).text == "My T"
    assert root.find(".//%stext[@id='subtitle']" % NS).text == "Sub"
    assert all(f["h"] == 19.0 for f in fr)
    assert abs(find(fr, "all")["w"] - 780) < 0.01
    assert "3 bytes" in find(fr, "b")["title"]
    assert root.get("data-nametype") == "Func:"
    assert b"Courier" in raw and b"font-size:10px" in raw and b"hello" in raw


@test
def option_colors():
    text = "caml_main;camlFoo__Bar.run_12;caml_call_gc;caml_major_collection_slice 5\n" \
           "caml_main;memcpy 1\ncaml_main;camlFoo__Bar.run_12;caml_alloc_string 1\n"
    _, hot, _, _ = render(text)
    _, mem, _, _ = render(text, "--colors", "mem")
    assert find(hot, "memcpy")["fill"] != find(mem, "memcpy")["fill"]
    _, oc, _, _ = render(text, "--colors", "ocaml")
    gc = rgb(find(oc, "caml_major_collection_slice")["fill"])
    ml = rgb(find(oc, "camlFoo__Bar.run_12")["fill"])
    c = rgb(find(oc, "memcpy")["fill"])
    rt = rgb(find(oc, "caml_main")["fill"])
    assert gc[1] > gc[0] and gc[1] > gc[2], gc            # GC: green
    assert ml[0] > ml[2], ml                                 # OCaml code: warm
    assert rt[2] > rt[0], rt                                 # runtime: blue-ish
    assert len({gc, ml, c, rt}) == 4
    rc, _, err = run(["--colors", "nosuch", write("x.folded", "a 1\n")])
    assert rc == 2 and "nosuch" in err
    for pal in ["hot", "mem", "io", "red", "green", "blue", "aqua", "yellow", "purple", "orange"]:
        render("a;b 1\n", "--colors", pal, "--hash")


@test
def option_consistent_palette():
    pm = os.path.join(TMP, "palette.map")
    if os.path.exists(pm):
        os.remove(pm)
    _, fr, _, _ = render("main;keep 1\n", "--cp")
    lines = open(pm).read().splitlines()
    assert "keep->%s" % find(fr, "keep")["fill"].replace(" ", "") in lines, lines
    with open(pm, "w") as f:
        f.write("keep->rgb(1,2,3)\nother->rgb(4,5,6)\n")
    _, fr, _, _ = render("main;keep 1\n", "--cp")
    assert find(fr, "keep")["fill"] == "rgb(1,2,3)"
    assert "other->rgb(4,5,6)" in open(pm).read()


@test
def option_help_lists_options():
    p = subprocess.run([FLAMME, "svg", "--help"], capture_output=True, text=True)
    assert p.returncode == 0
    for o in ["--title", "--subtitle", "--width", "--height", "--minwidth", "--fonttype",
              "--fontsize", "--countname", "--nametype", "--colors", "--hash", "--cp", "--reverse",
              "--inverted", "--flamechart", "--negate", "--notes", "--threads", "-o"]:
        assert o in p.stdout, o
    rc, _, err = run(["--width", "abc", "x"])
    assert rc == 2 and "--width" in err


# ------------------------------------------------------------- escaping

HOSTILE = ['<script>alert(1)</script>', '"quoted" & \'single\'', 'cdata ]]> end',
           '</title><script>alert(2)</script>', 'x"),alert(3)//', '<!-- c -->']


@test
def escaping_hostile_names():
    text = "".join("main;%s 1\n" % h for h in HOSTILE)
    root, fr, _, raw = render(text, "--title", "<script>t</script>", "--countname", "\"><script>",
                              "--notes", "--><script>alert(4)</script><!--", "--fonttype",
                              "x;}</style><script>")
    scripts = root.findall(".//%sscript" % NS)
    assert len(scripts) == 1, "only the viewer's own script"
    names = {f["name"] for f in fr}
    for h in HOSTILE:
        assert h in names, h                              # shown verbatim, as text
    assert b"alert" not in scripts[0].text.encode()
    assert root.find(".//%stext[@id='title']" % NS).text == "<script>t</script>"
    assert len(root.findall(".//%sstyle" % NS)) == 1


# ------------------------------------------------------------- browser

BROWSER_INPUT = "main;foo;foo 10\nmain;foo;baz 20\nmain;bar 30\nother;foo 40\n"


def chromium_dump(url):
    assert CHROMIUM, "chromium is not installed (make deps installs it)"
    prof = tempfile.mkdtemp(prefix="flamme-chromium-")
    try:
        p = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                            "--no-first-run", "--disable-background-networking",
                            "--disable-component-update", "--disable-sync",
                            "--user-data-dir=" + prof, "--dump-dom", "--virtual-time-budget=10000",
                            url], capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(prof, ignore_errors=True)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


HARNESS = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>
%s
<pre id="result">not run</pre>
<script>
(function () {
  var out = {};
  try {
    var F = flamme;
    function fr(name, d, n) { return F.frames.filter(function (f) {
      return f.name === name && f.d === d && (n === undefined || f.n === n); })[0]; }
    function w(f) { return +f.rect.getAttribute("width"); }
    function click(el) { el.dispatchEvent(new MouseEvent("click", {bubbles: true, cancelable: true})); }
    out.W = F.W;
    out.foo_w_before = w(fr("foo", 2, 30));
    click(fr("foo", 2, 30).rect);
    out.zoomed_w = w(fr("foo", 2, 30));
    out.child_foo_w = w(fr("foo", 3));
    out.child_baz_w = w(fr("baz", 3));
    out.main_parent = fr("main", 1).g.classList.contains("parent");
    out.main_w = w(fr("main", 1));
    out.bar_hidden = fr("bar", 2).g.style.display === "none";
    out.other_hidden = fr("other", 1).g.style.display === "none";
    out.unzoom_shown = !document.getElementById("unzoom").classList.contains("hide");
    fr("baz", 3).rect.dispatchEvent(new MouseEvent("mouseover", {bubbles: true}));
    out.details = document.getElementById("details").textContent;
    out.search_pct = flamme_search("foo");
    out.matched = document.getElementById("matched").textContent;
    out.foo_fill = fr("foo", 2, 30).rect.getAttribute("fill");
    out.bar_fill_after_search = fr("bar", 2).rect.getAttribute("fill");
    out.upper = flamme_search("FOO");
    click(document.getElementById("ignorecase"));
    out.upper_ic = flamme_search("FOO");
    click(document.getElementById("unzoom"));
    out.foo_w_after_unzoom = w(fr("foo", 2, 30));
    out.bar_shown_after_unzoom = fr("bar", 2).g.style.display !== "none";
  } catch (e) { out.error = String(e) + " " + e.stack; }
  document.getElementById("result").textContent = JSON.stringify(out);
})();
</script></body></html>
"""


@test
def browser_click_zoom_and_search():
    _, _, _, raw = render(BROWSER_INPUT)
    res = harness_result(HARNESS, raw, "harness.html")
    W = res["W"]
    near = lambda a, b: abs(a - b) < 0.02
    assert near(res["foo_w_before"], W * 30 / 100), res
    assert near(res["zoomed_w"], W), res                      # clicked frame spans the width
    assert near(res["child_foo_w"], W * 10 / 30), res
    assert near(res["child_baz_w"], W * 20 / 30), res
    assert res["main_parent"] and near(res["main_w"], W), res  # ancestor stays, faded
    assert res["bar_hidden"] and res["other_hidden"] and res["unzoom_shown"], res
    assert "baz" in res["details"] and "20 samples" in res["details"], res["details"]
    assert "66.67% of zoom" in res["details"], res["details"]
    # outermost matches only: main;foo (30) + other;foo (40), not the nested foo
    assert abs(res["search_pct"] - 70.0) < 1e-9 and res["matched"] == "Matched: 70.0%", res
    assert res["foo_fill"] == "rgb(230,0,230)" and res["bar_fill_after_search"] != "rgb(230,0,230)"
    assert res["upper"] == 0 and abs(res["upper_ic"] - 70.0) < 1e-9, res
    assert near(res["foo_w_after_unzoom"], W * 30 / 100) and res["bar_shown_after_unzoom"], res


THREADS_HARNESS = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>
%s
<pre id="result">not run</pre>
<script>
(function () {
  var out = {};
  try {
    var F = flamme, sel = document.querySelectorAll("#threads text");
    function fr(name) { return F.frames.filter(function (f) { return f.name === name && f.d === 1; })[0]; }
    function click(el) { el.dispatchEvent(new MouseEvent("click", {bubbles: true, cancelable: true})); }
    out.labels = Array.prototype.map.call(sel, function (t) { return t.textContent; });
    click(sel[out.labels.indexOf("domain 1")]);
    out.dom_w = +fr("domain 1").rect.getAttribute("width");
    out.main_hidden = fr("main").g.style.display === "none";
    out.dom_on = sel[out.labels.indexOf("domain 1")].classList.contains("on");
    out.all_on = sel[0].classList.contains("on");
    click(sel[0]);
    out.main_shown_after_all = fr("main").g.style.display !== "none";
    out.all_on_after = sel[0].classList.contains("on");
  } catch (e) { out.error = String(e) + " " + e.stack; }
  document.getElementById("result").textContent = JSON.stringify(out);
})();
</script></body></html>
"""


def harness_result(template, raw, name):
    svg = raw.decode("utf-8")
    page = write(name, template % svg[svg.index("<svg"):])
    dom = chromium_dump("file://" + page)
    m = re.search(r'<pre id="result">(.*?)</pre>', dom, re.S)
    assert m, "no result in the dumped DOM"
    res = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&")
                     .replace("&lt;", "<").replace("&gt;", ">"))
    assert "error" not in res, res.get("error")
    return res


@test
def browser_thread_selector():
    root, _, _, raw = render("main;a 30\ndomain 1;b 70\n", "--threads")
    W = float(root.get("data-w"))
    res = harness_result(THREADS_HARNESS, raw, "threads.html")
    assert res["labels"] == ["all", "domain 1", "main"], res
    assert abs(res["dom_w"] - W) < 0.02 and res["main_hidden"], res
    assert res["dom_on"] and not res["all_on"], res
    assert res["main_shown_after_all"] and res["all_on_after"], res


@test
def browser_standalone_svg_url_state():
    _, fr, _, raw = render(BROWSER_INPUT)
    path = os.path.join(TMP, "state.svg")
    with open(path, "wb") as f:
        f.write(raw)
    other_foo = [f for f in fr if f["name"] == "foo" and f["d"] == 2 and f["n"] == 40][0]
    dom = chromium_dump("file://%s?x=%g&y=2&s=ba" % (path, other_foo["s"]))
    got = frames_of(ET.fromstring(dom[dom.index("<svg"):]))
    assert abs([f for f in got if f["name"] == "foo" and f["d"] == 2 and f["n"] == 40][0]["w"]
               - float(ET.fromstring(raw).get("data-w"))) < 0.02
    assert re.search(r'id="matched"[^>]*>Matched: 50\.0%<', dom), "search from ?s= not applied"


@test
def browser_hostile_names_do_not_run():
    text = "".join("main;%s 1\n" % h for h in HOSTILE)
    _, _, _, raw = render(text)
    path = os.path.join(TMP, "hostile.svg")
    with open(path, "wb") as f:
        f.write(raw)
    # a script that ran would have to call alert(); make it visible instead
    dom = chromium_dump("file://%s?s=alert" % path)
    assert "Matched:" in dom, "viewer script did not run"
    svg = raw.decode("utf-8")
    page = write("hostile.html", "<html><body><script>window.alert=function(m){document.title='PW'+'NED'+m};"
                 "</script>%s</body></html>" % svg[svg.index("<svg"):])
    dom = chromium_dump("file://" + page)
    assert "PWNED" not in dom


def main():
    passed = failed = 0
    for fn in results:
        try:
            fn()
            passed += 1
            print("ok %s" % fn.__name__)
        except Exception:
            failed += 1
            print("FAIL %s" % fn.__name__)
            traceback.print_exc(limit=3)
    shutil.rmtree(TMP, ignore_errors=True)
    print("render: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""tests/render/test_render.py — `flamme svg`, the flame graph renderer
(make render-test, part of make test).

Runs the real command on small folded inputs written here, parses the SVG
it writes (it must be well-formed XML) and checks what a user would see:
frame names, widths, order, colours, options, escaping of hostile names, and,
in headless Debian chromium (tests marked `browser`), that clicking zooms and
searching reports the right "Matched" share. Expected numbers are computed
here from the inputs. chromium missing is a failure, not a skip (make deps
installs it).
"""
import json
import os
import re
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET

import pytest

import flmfile
from flammetest import clean_env

NS = "{http://www.w3.org/2000/svg}"
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)


class Render:
    """`flamme svg` run in one test's directory DIR."""

    def __init__(self, flamme, d):
        self.flamme = flamme
        self.dir = d

    def write(self, name, text, mode="w"):
        path = os.path.join(self.dir, name)
        with open(path, mode) as f:
            f.write(text)
        return path

    def run(self, args, stdin=None, cwd=None, timeout=120):
        """flamme svg ARGS: (exit status, stdout bytes, stderr text)."""
        p = subprocess.run([self.flamme, "svg"] + args, input=stdin, capture_output=True,
                           cwd=cwd or self.dir, timeout=timeout, env=clean_env())
        return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")

    def render(self, text, *opts, expect_rc=0):
        """Renders folded text; returns (svg root element, frames, stderr, raw bytes)."""
        src = self.write("in.folded", text, "wb" if isinstance(text, bytes) else "w")
        out = os.path.join(self.dir, "out.svg")
        rc, _, err = self.run(list(opts) + [src, "-o", out])
        assert rc == expect_rc, "exit %d (want %d): %s" % (rc, expect_rc, err)
        raw = open(out, "rb").read()
        root = ET.fromstring(raw)
        return root, frames_of(root), err, raw


@pytest.fixture
def fg(build, tmp_path):
    return Render(build.flamme, str(tmp_path))


def frames_of(root):
    fr = root.find(".//%sg[@id='frames']" % NS)
    if fr is None:
        return []
    out = []
    for g in list(fr):  # <g>, or <a> for a --nameattr link
        title = g.find(NS + "title").text
        rect = g.find(NS + "rect")
        out.append({
            "name": g.get("fn") or title.split("\n")[0], "title": title,
            "s": float(g.get("s")), "n": float(g.get("n")), "m": float(g.get("m")),
            "d": int(g.get("d")), "elided": g.get("class") == "el",
            "x": float(rect.get("x")), "y": float(rect.get("y")), "w": float(rect.get("width")),
            "h": float(rect.get("height")), "fill": rect.get("fill"),
            "label": g.find(NS + "text").text or "", "el": g,
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


def test_parse_spaces_decimals_duplicates(fg):
    _, fr, _, _ = fg.render("main;do some work;leaf one 2.5\nmain;x 1\nmain;do some work;leaf one 4\n"
                         "main;y 3.\n")
    assert find(fr, "all", 0)["n"] == 10.5
    assert find(fr, "do some work", 2)["n"] == 6.5      # frame with spaces, duplicates summed
    assert find(fr, "leaf one", 3)["m"] == 6.5
    assert find(fr, "y", 2)["n"] == 3.0                   # "3." is a count
    check_widths_add_up(fr)


def test_parse_bad_lines_warn_with_file_and_line(fg):
    path = fg.write("bad.folded", "a;b 1\nno count here\n\na;c x\n 5\na;b 2\n")
    out = os.path.join(fg.dir, "bad.svg")
    rc, _, err = fg.run([path, "-o", out])
    assert rc == 0, err
    assert "bad.folded:2:" in err and "bad.folded:4:" in err and "bad.folded:5:" in err, err
    assert "bad.folded:3:" not in err, "blank line must be ignored silently: " + err
    fr = frames_of(ET.parse(out).getroot())
    assert find(fr, "b", 2)["n"] == 3.0


def test_parse_differential(fg):
    root, fr, _, _ = fg.render("main;grew 10 30\nmain;shrank 30 10\nmain;same 5 5\n")
    assert find(fr, "all", 0)["n"] == 45.0                 # widths from the second column
    r, g, b = rgb(find(fr, "grew", 2)["fill"])
    assert r == 255 and b < 255, find(fr, "grew", 2)["fill"]
    r, g, b = rgb(find(fr, "shrank", 2)["fill"])
    assert b == 255 and r < 255
    _, fr2, _, _ = fg.render("main;grew 10 30\nmain;shrank 30 10\n", "--negate")
    assert rgb(find(fr2, "grew", 2)["fill"])[2] == 255      # negate swaps the hues


def test_parse_stdin_and_merge_inputs(fg):
    a = fg.write("a.folded", "m;x 1\nm;y 2\n")
    b = fg.write("b.folded", "m;x 4\n")
    rc, svg, err = fg.run([a, b], )
    assert rc == 0, err
    fr = frames_of(ET.fromstring(svg))
    assert find(fr, "x", 2)["n"] == 5.0 and find(fr, "all", 0)["n"] == 7.0
    rc, svg, err = fg.run([], stdin=b"m;x 1\nm;z 2\n")
    assert rc == 0, err
    assert find(frames_of(ET.fromstring(svg)), "z", 2)["n"] == 2.0


def test_parse_empty_input_is_an_error(fg):
    rc, svg, err = fg.run([fg.write("empty.folded", "garbage\n")])
    assert rc == 2 and "no valid input" in err.lower(), (rc, err)
    assert b"No valid input" in svg


def test_parse_utf8_names(fg):
    _, fr, _, _ = fg.render("main;café_λ;日本 3\n".encode("utf-8"))
    assert find(fr, "日本", 3)["n"] == 3.0
    # invalid UTF-8 still yields well-formed XML (fg.render() parses it)
    fg.render(b"main;bad\xff\xfename 2\n")


def test_parse_deep_and_wide_inputs(fg):
    deep = ";".join(["rec"] * 12000)
    lines = [deep + " 500000", deep + ";leaf 1000"] + ["main;sib%06d 1" % i for i in range(100000)]
    _, fr, _, _ = fg.render("\n".join(lines) + "\n", "--minwidth", "0.5")
    assert find(fr, "leaf", 12001)["n"] == 1000.0
    assert find(fr, "rec", 12000)["n"] == 501000.0
    assert max(f["d"] for f in fr) == 12001
    # 1 sample is < 0.5 px of 601,000 over 1180 px: all siblings become one "…"
    el = [f for f in fr if f["elided"]]
    assert len(el) == 1 and el[0]["n"] == 100000 and el[0]["d"] == 2
    assert not any(f["name"].startswith("sib") for f in fr)
    check_widths_add_up(fr, max_depth=3)


# ------------------------------------------------------------- options


def test_option_inverted_puts_root_on_top(fg):
    _, fr, _, _ = fg.render("a;b;c 1\n")
    assert find(fr, "all")["y"] > find(fr, "c")["y"]
    root, fr, _, _ = fg.render("a;b;c 1\n", "--inverted")
    assert find(fr, "all")["y"] < find(fr, "c")["y"]
    assert root.find(".//%stext[@id='title']" % NS).text == "Icicle Graph"


def test_option_reverse_merges_leaves(fg):
    _, fr, _, _ = fg.render("a;b;c 1\nx;y;c 2\n", "--reverse")
    assert find(fr, "c", 1)["n"] == 3.0
    assert find(fr, "a", 3)["n"] == 1.0


def test_option_flamechart_keeps_input_order(fg):
    _, fr, _, _ = fg.render("zeta 1\nalpha 1\n")
    assert find(fr, "alpha")["s"] < find(fr, "zeta")["s"]
    root, fr, _, _ = fg.render("zeta 1\nalpha 1\nzeta 1\n", "--flamechart")
    z = [f for f in fr if f["name"] == "zeta"]
    assert len(z) == 2 and min(f["s"] for f in z) < find(fr, "alpha")["s"] < max(f["s"] for f in z)
    assert root.find(".//%stext[@id='title']" % NS).text == "Flame Chart"


def test_option_minwidth_elides_and_adds_up(fg):
    lines = ["main;big 1000"] + ["main;tiny%03d 1" % i for i in range(300)]
    root, fr, _, raw = fg.render("\n".join(lines) + "\n", "--minwidth", "2")
    # 1300 samples over 1180 px: 1 sample < 2 px, so every tiny frame goes
    el = [f for f in fr if f["elided"]]
    assert len(el) == 1 and el[0]["n"] == 300 and el[0]["d"] == 2
    assert not any(f["name"].startswith("tiny") for f in fr)
    check_widths_add_up(fr)
    assert "300 frames narrower than 2 px" in root.find(".//%stext[@id='elided']" % NS).text
    _, fr, _, _ = fg.render("\n".join(lines) + "\n", "--minwidth", "0")
    assert sum(1 for f in fr if f["name"].startswith("tiny")) == 300
    _, fr, _, _ = fg.render("\n".join(lines) + "\n", "--minwidth", "50%")
    assert sorted(f["name"] for f in fr if f["d"] == 2) == ["big", "\u2026"]


def test_option_texts_and_sizes(fg):
    root, fr, _, raw = fg.render("a;b 3\n", "--title", "My T", "--subtitle", "Sub", "--width", "800",
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


def test_option_colors(fg):
    text = "caml_main;camlFoo__Bar.run_12;caml_call_gc;caml_major_collection_slice 5\n" \
           "caml_main;memcpy 1\ncaml_main;camlFoo__Bar.run_12;caml_alloc_string 1\n"
    _, hot, _, _ = fg.render(text)
    _, mem, _, _ = fg.render(text, "--colors", "mem")
    assert find(hot, "memcpy")["fill"] != find(mem, "memcpy")["fill"]
    _, oc, _, _ = fg.render(text, "--colors", "ocaml")
    gc = rgb(find(oc, "caml_major_collection_slice")["fill"])
    ml = rgb(find(oc, "camlFoo__Bar.run_12")["fill"])
    c = rgb(find(oc, "memcpy")["fill"])
    rt = rgb(find(oc, "caml_main")["fill"])
    assert gc[1] > gc[0] and gc[1] > gc[2], gc            # GC: green
    assert ml[0] > ml[2], ml                                 # OCaml code: warm
    assert rt[2] > rt[0], rt                                 # runtime: blue-ish
    assert len({gc, ml, c, rt}) == 4
    rc, _, err = fg.run(["--colors", "nosuch", fg.write("x.folded", "a 1\n")])
    assert rc == 2 and "nosuch" in err
    for pal in ["hot", "mem", "io", "red", "green", "blue", "aqua", "yellow", "purple", "orange"]:
        fg.render("a;b 1\n", "--colors", pal, "--hash")


def test_option_consistent_palette(fg):
    pm = os.path.join(fg.dir, "palette.map")
    if os.path.exists(pm):
        os.remove(pm)
    _, fr, _, _ = fg.render("main;keep 1\n", "--cp")
    lines = open(pm).read().splitlines()
    assert "keep->%s" % find(fr, "keep")["fill"].replace(" ", "") in lines, lines
    with open(pm, "w") as f:
        f.write("keep->rgb(1,2,3)\nother->rgb(4,5,6)\n")
    _, fr, _, _ = fg.render("main;keep 1\n", "--cp")
    assert find(fr, "keep")["fill"] == "rgb(1,2,3)"
    assert "other->rgb(4,5,6)" in open(pm).read()


def test_option_help_lists_options(fg):
    p = subprocess.run([fg.flamme, "svg", "--help"], capture_output=True, text=True)
    assert p.returncode == 0
    # every flamegraph.pl option (GetOptions, including those its --help omits),
    # plus ours; each must be listed and accepted
    opts = {"--title": "T", "--subtitle": "S", "--width": "900", "--height": "12",
            "--minwidth": "1%", "--fonttype": "Arial", "--fontsize": "10", "--fontwidth": "0.6",
            "--countname": "samples", "--nametype": "F:", "--colors": "java", "--bgcolors": "blue",
            "--hash": None, "--random": None, "--cp": None, "--reverse": None, "--inverted": None,
            "--flamechart": None, "--negate": None, "--notes": "n", "--encoding": "UTF-8",
            "--nameattr": fg.write("help.attr", "b\tclass=x\n"), "--total": "500", "--factor": "2",
            "--threads": None, "-o": os.path.join(fg.dir, "help.svg"), "--help": None}
    src = fg.write("help.folded", "a;b 200\n")
    for o, arg in opts.items():
        assert re.search(r"(^|\s|,)%s\b" % re.escape(o), p.stdout), "--help does not list " + o
        if o == "--help":
            continue
        rc, _, err = fg.run([o] + ([arg] if arg is not None else []) + [src, "-o", os.path.join(fg.dir, "h.svg")])
        assert rc == 0, (o, err)
    rc, _, err = fg.run(["--width", "abc", "x"])
    assert rc == 2 and "--width" in err


def stops(root):
    return [st.get("stop-color") for st in root.iter(NS + "stop")]


def test_option_bgcolors(fg):
    r, _, _, _ = fg.render("a;b 1\n")
    assert stops(r) == ["#eeeeee", "#eeeeb0"], stops(r)                  # hot: yellow
    for pal, want in [("mem", ["#eef2ee", "#e0ffe0"]), ("io", ["#eeeeee", "#e0e0ff"]),
                      ("chain", ["#eeeeee", "#e0e0ff"]), ("red", ["#f8f8f8", "#e8e8e8"]),
                      ("java", ["#eeeeee", "#eeeeb0"])]:
        r, _, _, _ = fg.render("a;b 1\n", "--colors", pal)
        assert stops(r) == want, (pal, stops(r))
    for bg, want in [("yellow", ["#eeeeee", "#eeeeb0"]), ("blue", ["#eeeeee", "#e0e0ff"]),
                     ("green", ["#eef2ee", "#e0ffe0"]), ("grey", ["#f8f8f8", "#e8e8e8"]),
                     ("#12ab9F", ["#12ab9F", "#12ab9F"])]:
        r, _, _, _ = fg.render("a;b 1\n", "--colors", "mem", "--bgcolors", bg)
        assert stops(r) == want, (bg, stops(r))
    for bad in ["pink", "#12345", "#12345g", "\"><script>"]:
        rc, _, err = fg.run(["--bgcolors", bad, fg.write("x.folded", "a 1\n")])
        assert rc == 2 and "--bgcolors" in err, (bad, rc, err)


def test_option_nameattr(fg):
    attr = fg.write("fn.attr", "b\thref=http://example.com/b?x=1&y=<2>\ttitle=custom \"b\" <tip>\t"
                 "class=mine\tid=fb\tg_extra=data-k=\"v&w\" data-j='q'\ta_extra=rel=\"noopener\"\n"
                 "c\tclass=first\n"
                 "c\tclass=later\tunknown=ignored\n"
                 "absent\tclass=nothing\n")
    root, fr, err, raw = fg.render("a;b 3\na;c 1\n", "--nameattr", attr)
    b = find(fr, "b", 2)
    el = b["el"]
    assert el.tag == NS + "a", el.tag                                   # an href makes a link
    assert el.get("{http://www.w3.org/1999/xlink}href") == "http://example.com/b?x=1&y=<2>"
    assert el.get("target") == "_top" and el.get("rel") == "noopener"
    assert el.get("class") == "mine" and el.get("id") == "fb"
    assert el.get("data-k") == "v&w" and el.get("data-j") == "q"
    assert b["title"] == 'custom "b" <tip>', b["title"]                 # title replaces the tooltip
    assert abs(b["n"] - 3) < 1e-9 and b["label"] == "b"
    c = find(fr, "c", 2)
    assert c["el"].tag == NS + "g" and c["el"].get("class") == "later"  # the later line wins
    assert "1 samples" in c["title"]
    assert find(fr, "a", 1)["el"].get("class") is None
    for bad, why in [("nottab class=x\n", "fn.attr:1"), ("b\tclass=x\nb\tnoequals\n", "fn.attr:2"),
                     ("b\tg_extra=onclick=\"alert(1)\"\n", "fn.attr:1"),
                     ("b\tg_extra=s=\"1\"\n", "fn.attr:1"), ("b\tg_extra=x=unquoted\n", "fn.attr:1")]:
        path = fg.write("fn.attr", bad)
        rc, _, err = fg.run(["--nameattr", path, fg.write("x.folded", "a;b 1\n")])
        assert rc == 2 and why in err, (bad, rc, err)
    rc, _, err = fg.run(["--nameattr", os.path.join(fg.dir, "missing.attr"), fg.write("x.folded", "a 1\n")])
    assert rc == 2 and "missing.attr" in err


def test_option_total_scales_against_a_larger_total(fg):
    text = "a;b 30\na;c 10\n"
    root, fr, err, _ = fg.render(text, "--total", "160")
    W = float(root.get("data-w"))
    allf = find(fr, "all", 0)
    assert allf["n"] == 160 and abs(allf["w"] - W) < 0.02               # root spans the total
    assert abs(find(fr, "b", 2)["w"] - W * 30 / 160) < 0.02, find(fr, "b", 2)["w"]
    assert "18.75%" in find(fr, "b", 2)["title"]
    check_widths_add_up(fr)
    # smaller than the real sum: ignored with a warning (as flamegraph.pl)
    root, fr, err, _ = fg.render(text, "--total", "20")
    assert "--total" in err and "ignored" in err, err
    assert find(fr, "all", 0)["n"] == 40 and abs(find(fr, "b", 2)["w"] - W * 30 / 40) < 0.02
    _, fr, _, _ = fg.render(text, "--total", "4000000000", "--minwidth", "0")  # perf-style weights
    assert find(fr, "all", 0)["n"] == 4e9 and "0.00%" in find(fr, "b", 2)["title"]


def test_option_factor_scales_counts_not_widths(fg):
    text = "a;b 3\na;c 1.5\n"
    _, plain, _, _ = fg.render(text)
    _, fr, _, _ = fg.render(text, "--factor", "1000")
    b, c = find(fr, "b", 2), find(fr, "c", 2)
    assert "3,000 samples" in b["title"] and "1,500 samples" in c["title"], (b["title"], c["title"])
    assert b["w"] == find(plain, "b", 2)["w"] and "66.67%" in b["title"]
    assert find(fr, "all", 0)["n"] == 4500
    _, fr, _, _ = fg.render(text, "--factor", "1000", "--total", "9")   # --total is in input units
    assert find(fr, "all", 0)["n"] == 9000 and "33.33%" in find(fr, "b", 2)["title"]
    for bad in ["0", "-1", "x", "1e-300"]:
        rc, _, err = fg.run(["--factor", bad, fg.write("x.folded", "a 1\n")])
        assert rc == 2 and "--factor" in err, (bad, err)


def test_option_encoding(fg):
    _, _, _, raw = fg.render("main;caf\u00e9 1\n", "--encoding", "UTF-8")
    assert raw.startswith(b'<?xml version="1.0" encoding="UTF-8" standalone="no"?>'), raw[:80]
    _, _, _, raw = fg.render("a;b 1\n", "--encoding", "ISO-8859-1")
    assert raw.startswith(b'<?xml version="1.0" encoding="ISO-8859-1" standalone="no"?>')
    _, _, _, raw = fg.render("a;b 1\n")
    assert raw.startswith(b'<?xml version="1.0" standalone="no"?>')
    for bad in ['utf-8" x="', "8bit", ""]:
        rc, _, err = fg.run(["--encoding", bad, fg.write("x.folded", "a 1\n")])
        assert rc == 2 and "--encoding" in err, (bad, err)


def test_option_random_colors(fg):
    text = "".join("r;p%02d;same 1\n" % i for i in range(40))
    _, fr, _, _ = fg.render(text)
    assert len({f["fill"] for f in fr if f["name"] == "same"}) == 1      # default: colour per name
    _, fr1, _, _ = fg.render(text, "--random")
    fills = [f["fill"] for f in fr1 if f["name"] == "same"]
    assert len(fills) == 40 and len(set(fills)) > 10, fills              # random: per frame
    for f in fr1:                                                         # still the hot palette
        r, g, b = rgb(f["fill"])
        assert 205 <= r <= 255 and 0 <= g <= 230 and 0 <= b <= 55, f["fill"]
    _, fr2, _, _ = fg.render(text, "--random")
    assert [f["fill"] for f in fr2] != [f["fill"] for f in fr1]           # and differs per run


def kind(fill):
    """Which flamegraph.pl flat palette a colour comes from."""
    r, g, b = rgb(fill)
    if b == 0 and r >= 190 and 90 <= g <= 155:
        return "orange"
    if r == g and 175 <= r <= 230 and 50 <= b <= 70:
        return "yellow"
    if r == b and 50 <= r <= 110 and g >= 200:
        return "green"
    if g == b and 50 <= r <= 110 and 165 <= g <= 220:
        return "aqua"
    if g == b and r >= 200 and 50 <= g <= 130:
        return "red"
    if r == g and 80 <= r <= 140 and b >= 205:
        return "blue"
    return "other %s" % fill


def kinds(fg, text, pal):
    _, fr, _, _ = fg.render(text, "--colors", pal)
    return {f["name"]: kind(f["fill"]) for f in fr if f["d"] > 0}, fr


def test_palettes_java_js_perl_wakeup_chain(fg):
    k, _ = kinds(fg, "Ljava/lang/Thread.run;org/app/Main.go;jit_fn_[j];inl_fn_[i];std::vector::push;"
                 "Foo:::bar;schedule_[k];memcpy 1\n", "java")
    assert k == {"Ljava/lang/Thread.run": "green", "org/app/Main.go": "green", "jit_fn": "green",
                 "inl_fn": "aqua", "std::vector::push": "yellow", "Foo:::bar": "green",
                 "schedule": "orange", "memcpy": "red"}, k
    k, _ = kinds(fg, "builtin_[j];/app/x.js:12_[j];v8::internal::Run;/srv/app.js:42;Builtin:ArrayMap;"
                 "do_syscall_[k];malloc 1\n", "js")
    assert k == {"builtin": "aqua", "/app/x.js:12": "green", "v8::internal::Run": "yellow",
                 "/srv/app.js:42": "green", "Builtin:ArrayMap": "aqua", "do_syscall": "orange",
                 "malloc": "red"}, k
    k, _ = kinds(fg, "Foo::bar;Perl_runops;script.pl:10;sys_read_[k];libc_read 1\n", "perl")
    assert k == {"Foo::bar": "yellow", "Perl_runops": "green", "script.pl:10": "green",
                 "sys_read": "orange", "libc_read": "red"}, k
    k, _ = kinds(fg, "a;b;c 1\n", "wakeup")
    assert set(k.values()) == {"aqua"}, k
    # chain: off-CPU frames blue, frames past the "--" separator (the waker) aqua
    k, fr = kinds(fg, "main;sleep;--;waker;wakefn 5\nmain;work 3\nmain;x_[w] 1\n", "chain")
    assert k["main"] == k["sleep"] == k["work"] == "blue", k
    assert k["waker"] == k["wakefn"] == k["x"] == "aqua", k
    assert find(fr, "--")["fill"] == "rgb(160,160,160)"
    _, fr, _, _ = fg.render("a;-;b 1\n", "--colors", "java")
    assert find(fr, "-")["fill"] == "rgb(200,200,200)"


def test_low_stack_count_warning(fg):
    _, _, err, _ = fg.render("a;b 5\na;c 94\n")
    assert "stack count is low (99)" in err.lower(), err
    _, _, err, _ = fg.render("a;b 5\na;c 95\n")
    assert "stack count is low" not in err.lower(), err
    _, _, err, _ = fg.render("a;b 5\n", "--countname", "bytes")            # only for samples
    assert "stack count is low" not in err.lower(), err


def profile_bytes(stacks):
    """A flamme profile (tests/flmfile.py): stacks = [(frame names root first, samples)]."""
    body = flmfile.thread(100, 1, 0, 0, "main")
    ids = {}
    for frames, _ in stacks:
        for fn in frames:
            if fn not in ids:
                ids[fn] = len(ids)
                body += flmfile.frame(ids[fn], 0x1000 + ids[fn], 0, fn, "prog")
    total = 0
    for sid, (frames, n) in enumerate(stacks):
        body += flmfile.stack(sid, [ids[fn] for fn in reversed(frames)])
        body += b"".join(flmfile.sample(sid, 100, 1, 0, 0, total + k) for k in range(n))
        total += n
    body += flmfile.end(total, 0, total, 1)
    return flmfile.profile(body, minor=1)


def test_profile_piped_into_stdin(fg):
    prof = profile_bytes([(["caml_main", "run_app", "hot_leaf"], 120), (["caml_main", "memcpy"], 40)])
    path = fg.write("p.flm", prof, "wb")
    rc, from_file, err = fg.run([path])
    assert rc == 0, err
    # through a real pipe, as `cat p.flm | flamme svg -o x.svg`
    out = os.path.join(fg.dir, "piped.svg")
    p = subprocess.run("cat %s | %s svg -o %s" % (path, fg.flamme, out), shell=True,
                       capture_output=True, text=True, cwd=fg.dir)
    assert p.returncode == 0, p.stderr
    fr = frames_of(ET.parse(out).getroot())
    want = [(f["name"], f["d"], f["n"]) for f in frames_of(ET.fromstring(from_file))]
    assert sorted((f["name"], f["d"], f["n"]) for f in fr) == sorted(want), (fr, want)
    assert find(fr, "all", 0)["n"] == 160
    assert sorted(f["n"] for f in fr if f["d"] == 2) == [40, 120], fr
    # a damaged profile in a pipe is reported as such, not parsed as text
    p = subprocess.run([fg.flamme, "svg"], input=prof[:30], capture_output=True, cwd=fg.dir)
    assert p.returncode != 0 and b"<stdin>" in p.stderr and b"profile" in p.stderr, p.stderr
    # folded text shorter than the sniffed bytes still parses
    p = subprocess.run("printf 'a 1' | %s svg" % fg.flamme, shell=True, capture_output=True, cwd=fg.dir)
    assert p.returncode == 0 and find(frames_of(ET.fromstring(p.stdout)), "a", 1)["n"] == 1


# ------------------------------------------------------------- escaping

HOSTILE = ['<script>alert(1)</script>', '"quoted" & \'single\'', 'cdata ]]> end',
           '</title><script>alert(2)</script>', 'x"),alert(3)//', '<!-- c -->']


def test_escaping_hostile_names(fg):
    text = "".join("main;%s 1\n" % h for h in HOSTILE)
    root, fr, _, raw = fg.render(text, "--title", "<script>t</script>", "--countname", "\"><script>",
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


def harness(js):
    """A page holding the SVG (the template's %s) and then a script that runs
    JS against the viewer (`flamme`, flamme_search): JS fills `out`, which the
    page shows as JSON in <pre id="result"> (harness_result reads it)."""
    return ("""<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>
%s
<pre id="result">not run</pre>
<script>
(function () {
  var out = {};
  try {
""" + js + """  } catch (e) { out.error = String(e) + " " + e.stack; }
  document.getElementById("result").textContent = JSON.stringify(out);
})();
</script></body></html>
""")


HARNESS = harness("""
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
""")


@pytest.mark.browser
def test_browser_click_zoom_and_search(fg):
    _, _, _, raw = fg.render(BROWSER_INPUT)
    res = harness_result(fg, HARNESS, raw, "harness.html")
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


THREADS_HARNESS = harness("""
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
""")


def harness_result(fg, template, raw, name):
    svg = raw.decode("utf-8")
    page = fg.write(name, template % svg[svg.index("<svg"):])
    dom = chromium_dump("file://" + page)
    m = re.search(r'<pre id="result">(.*?)</pre>', dom, re.S)
    assert m, "no result in the dumped DOM"
    res = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&")
                     .replace("&lt;", "<").replace("&gt;", ">"))
    assert "error" not in res, res.get("error")
    return res


@pytest.mark.browser
def test_browser_thread_selector(fg):
    root, _, _, raw = fg.render("main;a 30\ndomain 1;b 70\n", "--threads")
    W = float(root.get("data-w"))
    res = harness_result(fg, THREADS_HARNESS, raw, "threads.html")
    assert res["labels"] == ["all", "domain 1", "main"], res
    assert abs(res["dom_w"] - W) < 0.02 and res["main_hidden"], res
    assert res["dom_on"] and not res["all_on"], res
    assert res["main_shown_after_all"] and res["all_on_after"], res


@pytest.mark.browser
def test_browser_standalone_svg_url_state(fg):
    _, fr, _, raw = fg.render(BROWSER_INPUT)
    path = os.path.join(fg.dir, "state.svg")
    with open(path, "wb") as f:
        f.write(raw)
    other_foo = [f for f in fr if f["name"] == "foo" and f["d"] == 2 and f["n"] == 40][0]
    dom = chromium_dump("file://%s?x=%g&y=2&s=ba" % (path, other_foo["s"]))
    got = frames_of(ET.fromstring(dom[dom.index("<svg"):]))
    assert abs([f for f in got if f["name"] == "foo" and f["d"] == 2 and f["n"] == 40][0]["w"]
               - float(ET.fromstring(raw).get("data-w"))) < 0.02
    assert re.search(r'id="matched"[^>]*>Matched: 50\.0%<', dom), "search from ?s= not applied"


@pytest.mark.browser
def test_browser_hostile_names_do_not_run(fg):
    text = "".join("main;%s 1\n" % h for h in HOSTILE)
    _, _, _, raw = fg.render(text)
    path = os.path.join(fg.dir, "hostile.svg")
    with open(path, "wb") as f:
        f.write(raw)
    # a script that ran would have to call alert(); make it visible instead
    dom = chromium_dump("file://%s?s=alert" % path)
    assert "Matched:" in dom, "viewer script did not run"
    svg = raw.decode("utf-8")
    page = fg.write("hostile.html", "<html><body><script>window.alert=function(m){document.title='PW'+'NED'+m};"
                 "</script>%s</body></html>" % svg[svg.index("<svg"):])
    dom = chromium_dump("file://" + page)
    assert "PWNED" not in dom


LINK_HARNESS = harness("""
    var F = flamme;
    function fr(name) { return F.frames.filter(function (f) { return f.name === name; })[0]; }
    var b = fr("b");
    out.tag = b.g.localName;
    b.rect.dispatchEvent(new MouseEvent("click", {bubbles: true, cancelable: true}));
    out.zoomed_plain = F.zoomed ? F.zoomed.name : null;
    var ev = new MouseEvent("click", {bubbles: true, cancelable: true, ctrlKey: true});
    b.rect.dispatchEvent(ev);
    out.zoomed_ctrl = F.zoomed ? F.zoomed.name : null;
    out.ctrl_prevented = ev.defaultPrevented;
    out.search = flamme_search("^b$");
    b.rect.dispatchEvent(new MouseEvent("mouseover", {bubbles: true}));
    out.details = document.getElementById("details").textContent;
""")


@pytest.mark.browser
def test_browser_nameattr_link_zooms_on_ctrl_click(fg):
    attr = fg.write("link.attr", "b\thref=#nowhere\ttitle=custom tip\n")
    _, _, _, raw = fg.render("a;b 3\na;c 1\n", "--nameattr", attr)
    res = harness_result(fg, LINK_HARNESS, raw, "link.html")
    assert res["tag"] == "a", res
    assert res["zoomed_plain"] is None, res             # a plain click follows the link
    assert res["zoomed_ctrl"] == "b" and res["ctrl_prevented"], res
    assert abs(res["search"] - 75.0) < 1e-9, res        # searched by name, not by the custom title
    assert "b (3 samples" in res["details"], res

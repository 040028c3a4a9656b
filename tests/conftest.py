"""tests/conftest.py — fixtures of flamme's one test suite (`make test`).

`make test` builds flamme and libflamme.so, then runs pytest over tests/;
`make test T=expr` passes `-k expr`. What the fixtures give a test:

* `build`: the build under test (flammetest.Build: .flamme, .lib, .path()).
* `compiler`: an OCaml compiler make deps provides (flammetest.Compiler);
  a test that takes it runs once per compiler (5.3.0 fp, 5.3.0 no-fp,
  5.1.0 fp, ...; `--compilers 5.3.0-fp,5.3.0-nofp` narrows the set), with
  the compiler's name in its id: `test_x[5.3.0-nofp]`.
* `ocaml`: builds a test program with that compiler into
  build/progs/<compiler>/<dir>/ (flammetest.build_ocaml).
* `default_compiler`, `ocaml_default`: the same with the first compiler
  only, for tests whose subject does not depend on the compiler.
* `check`: soft assertions (flammetest.Checks): every check is printed,
  and a test with a failed check fails at its end listing all of them.
* `make_target`: runs a make target of the tree (for the groups that
  still have their own runner; see tests/test_groups.py).

Markers: `slow` (whole programs under several settings), `browser`
(drives Chromium). Settings come from the command line or, as make passes
them, the environment: FLAMME_BUILD, FLAMME_CACHE, FLAMME_COMPILERS.
"""
import os
import subprocess

import pytest

import flammetest


def pytest_addoption(parser):
    parser.addoption("--build", default=os.environ.get("FLAMME_BUILD", "build"),
                     help="the build directory under test (default: build)")
    parser.addoption("--cache", default=flammetest.CACHE, help="where make deps put the OCaml compilers")
    parser.addoption("--compilers", default=os.environ.get("FLAMME_COMPILERS", ""),
                     help="comma-separated compiler names (e.g. 5.3.0-fp,5.3.0-nofp); default: all")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: runs whole programs under several settings")
    config.addinivalue_line("markers", "browser: drives headless Chromium")


_compilers = None


def compilers(config):
    """The compilers tests run over, default first; [] without make deps."""
    global _compilers
    if _compilers is None:
        found, unknown = flammetest.select_compilers(config.getoption("--cache"),
                                                     config.getoption("--compilers"))
        if unknown:
            raise pytest.UsageError("--compilers: not in %s: %s (run make deps)"
                                    % (config.getoption("--cache"), ", ".join(unknown)))
        _compilers = found
    return _compilers


def pytest_generate_tests(metafunc):
    if "compiler" in metafunc.fixturenames:
        cs = compilers(metafunc.config)
        if not cs:
            raise pytest.UsageError("no OCaml compiler in %s: run `make deps`"
                                    % metafunc.config.getoption("--cache"))
        metafunc.parametrize("compiler", cs, ids=[c.name for c in cs], scope="session")


@pytest.fixture(scope="session")
def build(pytestconfig):
    b = flammetest.Build(pytestconfig.getoption("--build"))
    for p in (b.flamme, b.lib):
        if not os.path.exists(p):
            pytest.exit("%s is missing: run `make` first" % p, returncode=2)
    return b


@pytest.fixture(scope="session")
def ocaml(build, compiler):
    """ocaml(subdir, sources, **kw) -> exe: builds with this compiler into
    build/progs/<compiler>/<subdir>/ (see flammetest.build_ocaml)."""
    return flammetest.builder(build, compiler)


@pytest.fixture(scope="session")
def default_compiler(pytestconfig):
    """The first compiler (5.3.0 with frame pointers when present), for
    tests whose subject does not depend on the compiler (the command's
    handling of bad input, signals, engines' delivered rate)."""
    cs = compilers(pytestconfig)
    if not cs:
        pytest.exit("no OCaml compiler in %s: run `make deps`" % pytestconfig.getoption("--cache"),
                    returncode=2)
    return cs[0]


@pytest.fixture(scope="session")
def ocaml_default(build, default_compiler):
    """As `ocaml`, with the default compiler."""
    return flammetest.builder(build, default_compiler)


@pytest.fixture
def check():
    return flammetest.Checks()


@pytest.hookimpl(hookwrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    outcome = yield
    checks = pyfuncitem.funcargs.get("check")
    if outcome.excinfo is None and isinstance(checks, flammetest.Checks) and checks.failures:
        pytest.fail("%d of %d checks failed:\n  %s" % (
            len(checks.failures), len(checks.failures) + checks.passed,
            "\n  ".join(checks.failures)), pytrace=False)


@pytest.fixture(scope="session")
def make_target():
    """make_target(target, *args) -> CompletedProcess of `make TARGET` at the
    top of the tree (the same make and build as the caller's)."""
    mk = os.environ.get("FLAMME_MAKE", "make")

    def run(target, *args):
        return subprocess.run([mk, "--no-print-directory", target, *args], cwd=flammetest.REPO,
                              capture_output=True, text=True)
    return run

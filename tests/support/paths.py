"""Where the repository and the tests' own data are, for tests at any depth."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TESTS_DIR = REPO_ROOT / "tests"
FIXTURES = TESTS_DIR / "fixtures"
DATA = TESTS_DIR / "data"

"""The exported HTML page in a real browser (headless Chromium): nodes render, aspects
expand on a click, the search box filters facts and opens their ancestors."""

from __future__ import annotations

import html as htmllib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from langchain_membrain.tree.export import tree_to_html
from langchain_membrain.tree.tree import MembrainTree

CHROMIUM = next((p for p in (shutil.which("chromium"), "/usr/bin/chromium", shutil.which("chromium-browser"))
                 if p and Path(p).exists()), None)

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)",
)

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio"]


def chromium(tmp_path: Path, *args: str) -> str:
    profile = tmp_path / "chromium-profile"
    profile.mkdir(exist_ok=True)
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.fixture
def page(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    t = MembrainTree("users/maya")
    food = t.add_aspect(t.root_id, "food")
    allergies = t.add_aspect(food, "allergies")
    travel = t.add_aspect(t.root_id, "travel")
    t.add_fact(allergies, "allergic to peanuts")
    t.add_fact(allergies, "mild hay fever in spring <script>document.title='pwned'</script>")
    t.add_fact(food, "vegetarian since 2019")
    t.add_fact(travel, "Kyoto in April to see the cherry blossoms")
    t.add_fact(t.root_id, "lives in Lisbon")
    for i in range(200):  # enough facts to scroll
        t.add_fact(travel, f"trip note {i}")
    path = tmp_path / "memory.html"
    path.write_text(tree_to_html(t, title="Maya's memory", open_depth=1), encoding="utf-8")
    return path, {"food": food, "allergies": allergies, "travel": travel}


PROBE = """
<script>
(function () {
  function open(id) { return document.querySelector('li[data-id="' + id + '"] > details').open; }
  function visible(el) { return el.checkVisibility ? el.checkVisibility() : el.offsetParent !== null; }
  var r = {};
  r.title = document.title;
  r.status = document.getElementById('status').textContent;
  r.factsRendered = document.querySelectorAll('li.fact').length;
  r.allergiesOpenAtStart = open('ALLERGIES');
  r.peanutsVisibleAtStart = visible(document.querySelector('li.fact[data-text="allergic to peanuts"]'));
  document.querySelector('li[data-id="ALLERGIES"] > details > summary').click();
  r.allergiesOpenAfterClick = open('ALLERGIES');
  r.peanutsVisibleAfterClick = visible(document.querySelector('li.fact[data-text="allergic to peanuts"]'));
  document.querySelector('li[data-id="ALLERGIES"] > details > summary').click();
  r.allergiesOpenAfterSecondClick = open('ALLERGIES');
  var q = document.getElementById('q');
  q.value = 'PEANUTS';
  q.dispatchEvent(new Event('input'));
  window.membrain.search(q.value);  // the input handler is debounced; apply now
  r.statusAfterSearch = document.getElementById('status').textContent;
  r.allergiesOpenAfterSearch = open('ALLERGIES');
  r.travelHiddenAfterSearch = !visible(document.querySelector('li[data-id="TRAVEL"]'));
  r.visibleFacts = Array.prototype.filter.call(document.querySelectorAll('li.fact'), visible)
      .map(function (li) { return li.getAttribute('data-text'); });
  document.body.setAttribute('data-probe', JSON.stringify(r));
})();
</script>
"""


def test_nodes_render_expand_and_search_filters(page, tmp_path):
    path, ids = page
    probe = PROBE.replace("ALLERGIES", ids["allergies"]).replace("TRAVEL", ids["travel"])
    probed = tmp_path / "probe.html"
    probed.write_text(path.read_text(encoding="utf-8").replace("</body>", probe + "</body>"), encoding="utf-8")
    dom = chromium(tmp_path, "--virtual-time-budget=3000", "--dump-dom", probed.as_uri())
    m = re.search(r'data-probe="([^"]*)"', dom)
    assert m, dom[-3000:]
    r = json.loads(htmllib.unescape(m.group(1)))
    assert r["title"] == "Maya's memory"  # the fact's <script> did not run
    assert r["factsRendered"] == 205
    assert r["status"] == "205 facts"  # the page's own script ran
    # aspects below open_depth start closed; a click on the summary opens, a second closes
    assert r["allergiesOpenAtStart"] is False
    assert r["peanutsVisibleAtStart"] is False
    assert r["allergiesOpenAfterClick"] is True
    assert r["peanutsVisibleAfterClick"] is True
    assert r["allergiesOpenAfterSecondClick"] is False
    # the search (case-insensitive) keeps the match, opens its ancestors, hides other aspects
    assert r["statusAfterSearch"] == "1 of 205 facts match"
    assert r["allergiesOpenAfterSearch"] is True
    assert r["travelHiddenAfterSearch"] is True
    assert r["visibleFacts"] == ["allergic to peanuts"]


def test_search_from_the_url_and_screenshot(page, tmp_path):
    path, ids = page
    url = path.as_uri() + "#q=kyoto%20cherry"
    dom = chromium(tmp_path, "--virtual-time-budget=3000", "--dump-dom", url)
    assert '<span id="status" aria-live="polite">1 of 205 facts match</span>' in dom
    assert re.search(r'<li class="fact hit"[^>]*data-text="Kyoto in April', dom) or \
        re.search(r'<li class="fact[^"]*hit[^"]*"[^>]*data-text="Kyoto', dom)
    shot = tmp_path / "memory.png"
    chromium(tmp_path, "--window-size=1100,800", "--virtual-time-budget=3000", f"--screenshot={shot}",
             path.as_uri() + "#q=peanuts")
    assert shot.exists()
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 5_000  # not a blank page

"""report.html's case table in a real browser (Debian's Chromium through Selenium and its
chromium-driver): filter to a bucket and count the rows, open a case, reload from a fragment,
no console errors; a link with a view opens scrolled to it; and the error map of a numeric
failure."""
import json
import os
import shutil
import urllib.parse

import numpy as np
import pytest

from helpers import tools_tmpdir
from pipeline.outcome.bucket import signature
from pipeline.results.explorer import error_map
from pipeline.results.report import write_report

GEOMETRY = {"rank": 2, "spatial": [6, 5], "kernel": [3, 3], "stride": [1, 1], "c_in": 2, "c_out": 4, "padding": "valid"}
REASON = "torq-compile exit status 1: /tmp/x/model.mlir:3:7: error: 'linalg.generic' op unsupported in function body"
BUCKET = signature("compile", REASON)


def _numeric_failure(folder, wrong_at):
    """A case folder whose NHWC output (1, 4, 3, 4) is wrong at one position of channel 3."""
    folder.mkdir(parents=True)
    expected = np.linspace(-1, 1, 48, dtype=np.float32).reshape(1, 4, 3, 4)
    actual = expected.copy()
    actual[(0, *wrong_at, 3)] += 0.5
    np.save(folder / "actual.npy", actual)
    (folder / "repro-expected.bin").write_bytes(expected.tobytes())
    (folder / "check.json").write_text(json.dumps({"mode": "approximate", "atol": 0.01, "rtol": 0.0, "type": "f32"}))
    (folder / "run.log").write_text("EXEC @main\nresult[0]: hal.buffer_view\n")


def test_error_map_marks_where_the_output_is_wrong(tmp_path):
    _numeric_failure(tmp_path / "case", (2, 1))
    found = error_map(tmp_path / "case", channels_last=True)
    assert (found["width"], found["height"]) == (3, 4) and len(found["panels"]) == 4
    wrong = found["panels"][3]["values"]
    assert wrong[2][1] == 1000 and sum(map(sum, wrong)) == 1000  # 0.5 / 0.01 = 50x the limit, capped at 10x
    assert all(v == 0 for panel in found["panels"][:3] for row in panel["values"] for v in row)
    assert error_map(tmp_path / "absent", channels_last=True) is None


def _entry(case, status, stage=None, reason="", folder=None, flavor="w8i8"):
    return {"case": case, "target": "torq", "backend": "tflite", "flavor": flavor, "category": "sqsq",
            "geometry": GEOMETRY, "status": status, "stage": stage, "reason": reason,
            "metrics": {"vs x": {"name": "vs x", "passed": status == "pass", "max_abs_error": 0.5 if stage else 0.0,
                                 "max_tolerance": 0.01, "error_to_tolerance": 50.0 if stage else 0.1,
                                 "mismatches": 1 if stage else 0, "elements": 48}} if stage != "compile" else {},
            "notes": {}, "stages": {"compile": {"seconds": 0.5}}, "perf": {"compile_seconds": 0.5, "vmfb_bytes": 9000},
            "log": str(folder / "run.log") if folder else None,
            "repro": str((folder or "/nowhere") / "repro.sh") if folder else "/nowhere/repro.sh", "issue": ""}


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("explorer")
    _numeric_failure(tmp / "cases" / "conv_tflite_w8i8_bad" / "torq", (2, 1))
    folder = tmp / "cases" / "conv_tflite_w8i8_bad" / "torq"
    entries = [_entry(f"conv_tflite_w8i8_ok{i}", "pass") for i in range(5)]
    entries += [_entry(f"conv_tflite_f32_broken{i}", "xfail", "compile", REASON, flavor="f32") for i in range(3)]
    entries.append(_entry("conv_tflite_w8i8_bad", "fail", "verify", "vs x: 1 of 48 elements outside tolerance", folder))
    write_report(entries, tmp / "report", {"compiler": "torq-compile"})
    return tmp / "report" / "report.html"


@pytest.fixture(scope="module")
def browser():
    chromedriver = shutil.which("chromedriver")
    assert chromedriver and os.path.exists("/usr/bin/chromium"), \
        "install Debian's chromium and chromium-driver (the README's test line)"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # its TMPDIR the session's: chromium leaves its singleton folder there even after quit()
    service = Service(chromedriver, env={**os.environ, "TMPDIR": str(tools_tmpdir())})
    driver = webdriver.Chrome(service=service, options=options)
    yield driver
    driver.quit()


def _rows(driver):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, "#cases-body tr")


def test_filter_open_reload_and_no_console_errors(page, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(page.as_uri())
    assert browser.find_element(By.ID, "shown").text == "9 of 9" and len(_rows(browser)) == 9
    Select(browser.find_element(By.ID, "filter-bucket")).select_by_value(BUCKET)  # a bucket: its 3 cases
    assert browser.find_element(By.ID, "shown").text == "3 of 9" and len(_rows(browser)) == 3
    assert "bucket=" in browser.current_url and all("broken" in r.get_attribute("data-case") for r in _rows(browser))
    browser.find_element(By.ID, "search").send_keys("broken2")
    assert browser.find_element(By.ID, "shown").text == "1 of 9"

    # a view is a link: reopening the fragment gives the same rows
    fragment = "#status=xfail&flavor=tflite_f32"
    browser.get(page.as_uri() + fragment)
    browser.refresh()
    assert browser.find_element(By.ID, "shown").text == "3 of 9"
    assert Select(browser.find_element(By.ID, "filter-status")).first_selected_option.get_attribute("value") == "xfail"

    # sorting: by error / tolerance, largest first on the second click
    browser.get(page.as_uri())
    heading = browser.find_element(By.CSS_SELECTOR, 'th[data-key="ratio"]')
    heading.click()
    heading = browser.find_element(By.CSS_SELECTOR, 'th[data-key="ratio"]')
    heading.click()
    assert _rows(browser)[0].get_attribute("data-case") == "conv_tflite_w8i8_bad@torq"

    # a case's own view: geometry, checks, the error map, the log's tail, the repro command
    _rows(browser)[0].find_element(By.TAG_NAME, "a").click()
    view = browser.find_element(By.ID, "case-view")
    assert view.is_displayed() and browser.find_element(By.ID, "case-title").text == "conv_tflite_w8i8_bad"
    assert "case=conv_tflite_w8i8_bad@torq" in urllib.parse.unquote(browser.current_url)
    text = view.text
    for shown in ("spatial", "vs x", "Where the output is wrong", "EXEC @main", "repro.sh", "compile_seconds"):
        assert shown in text, shown
    assert len(view.find_elements(By.CSS_SELECTOR, "figure.map svg")) == 4
    browser.refresh()  # the open case is in the fragment too
    assert browser.find_element(By.ID, "case-view").is_displayed()

    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []


def _landing(driver, url, element):
    """Open `url` afresh (not as a fragment change of the page shown) and return (scrollY, the
    top of `element` in the viewport, the viewport's height) once the page is loaded."""
    driver.get("about:blank")
    driver.get(url)
    return _where(driver, element)


def _where(driver, element):
    return driver.execute_script(
        "const e = document.getElementById(arguments[0]);"
        "return [window.scrollY, e.getBoundingClientRect().top, window.innerHeight];", element)


def test_a_link_lands_on_its_view(tmp_path, browser):
    """The view a fragment names is on screen, at the viewport's top, when the page opens with
    it or when the fragment changes; a page without one opens at its top."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    entries = [_entry(f"conv_tflite_w8i8_ok{i}", "pass") for i in range(40)]  # enough rows to fill a screen
    entries += [_entry(f"conv_tflite_f32_broken{i}", "xfail", "compile", REASON, flavor="f32") for i in range(30)]
    write_report(entries, tmp_path, {"compiler": "torq-compile"})
    page = tmp_path / "report.html"
    browser.set_window_size(1000, 700)
    scroll, top, height = _landing(browser, page.as_uri(), "cases-heading")
    assert scroll == 0 and top > height, "the table starts below the first screen: there is somewhere to land"

    scroll, top, height = _landing(browser, page.as_uri() + "#status=xfail&flavor=tflite_f32", "cases-heading")
    assert browser.find_element(By.ID, "shown").text == "30 of 70"
    assert scroll > 0 and 0 <= top < 0.1 * height, (scroll, top, height)

    scroll, top, height = _landing(browser, page.as_uri() + "#case=conv_tflite_w8i8_ok3@torq", "case-view")
    assert browser.find_element(By.ID, "case-title").text == "conv_tflite_w8i8_ok3"
    assert scroll > 0 and 0 <= top < 0.1 * height, (scroll, top, height)

    # a fragment changed after the page opened lands too; a view closed by its link stays on the table
    scroll, _, _ = _landing(browser, page.as_uri(), "cases-heading")
    assert scroll == 0
    browser.execute_script("location.hash = 'case=conv_tflite_f32_broken1@torq';")
    WebDriverWait(browser, 5).until(lambda d: d.find_element(By.ID, "case-view").is_displayed())
    scroll, top, height = _where(browser, "case-view")
    assert browser.find_element(By.ID, "case-title").text == "conv_tflite_f32_broken1"
    assert scroll > 0 and 0 <= top < 0.1 * height, (scroll, top, height)
    browser.find_element(By.ID, "close-case").click()
    scroll, top, height = _where(browser, "cases-heading")
    assert not browser.find_element(By.ID, "case-view").is_displayed()
    assert scroll > 0 and 0 <= top < 0.1 * height, (scroll, top, height)
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_compare_html_lists_filter_search_and_sort(tmp_path, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from pipeline.triage.diff import KINDS, _html

    def change(case, old, new, stage):
        return {"case": case, "old": old, "new": new, "stage": stage, "reason": f"{stage} failed", "repro": "r.sh"}

    d = {key: [] for key, _ in KINDS}
    d.update(regressions=[change(f"conv_a{i}", "pass", "error", "compile") for i in range(4)]
             + [change("conv_b", "pass", "fail", "verify")],
             fixed=[change("conv_c", "error", "pass", None)], noise_floor=0.05, timing=None, flavors={})
    page = tmp_path / "compare.html"
    page.write_text(_html([("torq", "torq", d)], "old/build", "new/build"))
    browser.get(page.as_uri())
    assert browser.find_element(By.ID, "shown").text == "6 of 6"
    first = browser.find_elements(By.CSS_SELECTOR, "table.explore")[0]
    selects = first.find_element(By.XPATH, "preceding-sibling::p[1]").find_elements(By.TAG_NAME, "select")
    Select(selects[0]).select_by_visible_text("fixed")  # the change column
    assert browser.find_element(By.ID, "shown").text == "1 of 6"
    Select(selects[0]).select_by_index(0)
    search = first.find_element(By.XPATH, "preceding-sibling::p[1]").find_element(By.TAG_NAME, "input")
    search.send_keys("verify")
    assert browser.find_element(By.ID, "shown").text == "1 of 6"
    search.clear()
    search.send_keys(" ")  # any input event: back to every row
    first.find_elements(By.TAG_NAME, "th")[1].click()  # sort by case
    first.find_elements(By.TAG_NAME, "th")[1].click()  # descending
    visible = [r for r in first.find_elements(By.CSS_SELECTOR, "tr")[1:] if r.is_displayed()]
    assert visible[0].find_elements(By.TAG_NAME, "td")[1].text == "conv_c"
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_the_page_of_every_target_finds_a_case_of_each(tmp_path, browser):
    from selenium.webdriver.common.by import By

    from pipeline.results.explorer import records
    from pipeline.results.report import write_all_targets

    entries = [{**_entry(f"conv_tflite_w8i8_ok{i}", "pass"), "target": target}
               for target in ("llvm-cpu", "vmvx", "torq") for i in range(2)]
    write_all_targets(tmp_path, records(entries), ["llvm-cpu", "vmvx", "torq"])
    browser.get((tmp_path / "report.html").as_uri() + "#target=vmvx&case=conv_tflite_w8i8_ok1@vmvx")
    assert browser.find_element(By.ID, "shown").text == "2 of 6"
    assert browser.find_element(By.ID, "case-view").is_displayed()
    assert "on vmvx" in browser.find_element(By.ID, "case-view").text  # that case, on that target
    assert [a.get_attribute("href").rsplit("/", 2)[-2] for a in browser.find_elements(By.CSS_SELECTOR, "p a")][:3] == \
        ["llvm-cpu", "vmvx", "torq"]  # each target's own report

"""The rewriting of the expected-failures lists (pipeline/curate/lists.py). `doit accept_failures`,
`doit export_xfails` and `doit import_xfails` run end to end in tests/test_report.py, on its
sweep with failures."""


def test_a_stage_within_the_day_spread_of_its_budget_is_near_it():
    from pipeline.curate.lists import near_budget

    budgets = {"compile": 300.0, "run": 240.0}.get
    assert near_budget({"stages": {"compile": {"seconds": 99.0}, "run": {"seconds": 79.0}}}, budgets) is None
    assert near_budget({"stages": {"compile": {"seconds": 101.0}, "run": {"seconds": 200.0}}}, budgets) == "compile"
    assert near_budget({"stages": {"compile": {"seconds": 20.0}, "run": {"seconds": 81.0}}}, budgets) == "run"
    assert near_budget({"stages": {"compile": {"seconds": 20.0}}}, budgets) is None  # never ran

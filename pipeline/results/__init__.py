"""Reading results: the terminal summary, results.json, junit.xml and report.html."""

"""Reading results, never rewriting checked-in files: the terminal summary, results.json,
junit.xml and report.html."""

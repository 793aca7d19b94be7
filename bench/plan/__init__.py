"""The capacity plan's closing figures (issue 38): the plan chart as a PNG."""

"""Tables in files, checkpoints and the rows they track."""

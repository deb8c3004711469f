"""Demo jobs for ejcloud: a SIMPLE function, a DATAFLOW class and (in scripts/) a SCRIPT job."""

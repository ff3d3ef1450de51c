"""Running and executors: the one door (launch), executing a recorded run, its heartbeat, stop signals and log, the model kept between runs, local workers, Slurm, killing runs."""

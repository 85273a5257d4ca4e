"""What the monitor hands the training process outside the channel, named once for both:
the run folder's output log, and the environment variable with the pipes' read ends."""

OUTPUT_LOG = "output.log"  # in the run folder: the script's output, whole
OUTPUT_FDS_ENV = "FASTMON_OUTPUT_FDS"  # "stdout_fd,stderr_fd": the read ends the training holds

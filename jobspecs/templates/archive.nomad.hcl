# Archives the home volume of workspace [[ .WorkspaceID ]] to S3.
# Credentials are not here: the template block reads them from a Nomad
# Variable at run time, through the task's workload identity.
[[ template "mover_job" (mover . "archive") ]]

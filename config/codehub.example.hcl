# CodeHub configuration reference.
#
# Every setting is shown here with its default unless the comment says
# otherwise. Every setting is optional except where a comment says
# "required"; a block left out keeps all its defaults. Check a file with:
#
#   codehub config validate -config codehub.hcl
#
# Where a value comes from, highest precedence first:
#
#   1. this file: a value written here always wins;
#   2. the environment, for settings the file leaves out:
#        a. the variables Nomad's and Consul's own tools read, where one exists:
#           NOMAD_ADDR, NOMAD_TOKEN, NOMAD_NAMESPACE, NOMAD_REGION
#           (backend "nomad"), CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN (consul);
#        b. CODEHUB_ followed by the setting's path in upper case, dots and
#           block labels joined by underscores: CODEHUB_LISTEN,
#           CODEHUB_DATABASE_URL, CODEHUB_S3_SECRET_KEY,
#           CODEHUB_BACKEND_NOMAD_TOKEN, CODEHUB_AUTH_BOOTSTRAP_ADMIN_PASSWORD;
#   3. the default.
#
# So to take a secret from the environment, leave its line out of the file.
# An empty variable counts as unset. Only single values (strings, numbers,
# booleans) are read from the environment, never lists. The environment fills
# only blocks in use: the backend block of the chosen kind, and consul only
# when this file has a consul block.
#
# Durations are strings such as "90s", "15m", "2h" or "1h30m".
# Secrets (keys, tokens, passwords, the password in a URL) are never printed:
# codehub shows them as "set" or "unset".

# Address and port the HTTP server listens on (API, dashboard, proxy).
listen = "127.0.0.1:8080"

# URL users reach codehub at, scheme and host only; used for links, cookie
# security (https makes cookies Secure) and Origin checks. Leave out a
# default port (:443 for https, :80 for http): browsers omit it from Origin.
# Shown with a localhost name to match proxy.subdomain_base below, so not
# the default ("http://127.0.0.1:8080").
public_url = "http://localhost:8080"

# Log level: trace, debug, info, warn, error or off.
log_level = "info"

# Write logs as one JSON object per line instead of text.
log_json = false

database {
  # Required. PostgreSQL connection URL (postgres:// or postgresql://);
  # the password in it is a secret. Env: CODEHUB_DATABASE_URL.
  url = "postgres://codehub@127.0.0.1:5432/codehub"
}

redis {
  # Required. Redis URL (redis://, rediss:// or unix://) including the
  # logical database. Env: CODEHUB_REDIS_URL.
  url = "redis://127.0.0.1:6379/0"
}

# S3-compatible object store holding workspace archives.
s3 {
  # Required. host:port of the S3 endpoint, without scheme. Env: CODEHUB_S3_ENDPOINT.
  endpoint = "127.0.0.1:9000"

  # Required. Bucket the archives are written to. Env: CODEHUB_S3_BUCKET.
  bucket = "codehub"

  # Required secrets, no default. Prefer the environment in production:
  # delete these two lines and set CODEHUB_S3_ACCESS_KEY and
  # CODEHUB_S3_SECRET_KEY.
  access_key = "codehub-example-access"
  secret_key = "codehub-example-secret"

  # Use https to reach the endpoint.
  use_ssl = false

  # Region the bucket lives in.
  region = "us-east-1"
}

# Where workspaces run: exactly one backend block, labelled "nomad" or
# "local". Without one, backend "nomad" with the defaults below is used.
backend "nomad" {
  # Nomad HTTP API. Env: NOMAD_ADDR, then CODEHUB_BACKEND_NOMAD_ADDRESS.
  address = "http://127.0.0.1:4646"

  # Namespace the jobs and volumes live in. Env: NOMAD_NAMESPACE.
  namespace = "default"

  # Region to submit to; empty means the region of the agent at address.
  # Env: NOMAD_REGION.
  region = ""

  # ACL token (secret), default unset. Env: NOMAD_TOKEN, then
  # CODEHUB_BACKEND_NOMAD_TOKEN.
  # token = ""

  # DANGEROUS. Every workspace program can reach its node's Nomad agent
  # (docker with host networking, exec, raw_exec), so on a cluster that
  # does not enforce ACLs any user with a terminal reads every Nomad
  # Variable (other workspaces' upstream tokens, the stop-archive S3 keys)
  # and registers jobs. codehub asks the cluster at start, without a token,
  # for a workspace variable and refuses to start when it answers. true
  # runs anyway and logs a warning at every start: only for a cluster whose
  # workspace users may all do that (a single-user development setup).
  # Env: CODEHUB_BACKEND_NOMAD_INSECURE_ALLOW_NO_ACLS.
  insecure_allow_no_acls = false

  # Node pool workspaces and their archive/restore jobs are placed in.
  node_pool = "default"

  # Datacenters jobs may run in; "*" means all.
  datacenters = ["*"]

  # Task driver: "docker" (production), "exec", or "raw_exec" (development
  # only: it offers no isolation between a workspace and its node).
  driver = "docker"

  # Dynamic host volume plugin that creates each workspace's home volume.
  volume_plugin = "mkdir"

  # docker driver: image containing the codehub binary, which archive and
  # restore jobs run. Required with docker, no default; pin a tag or digest.
  job_image = "ghcr.io/codehub-io/codehub:1.0.0"

  # exec and raw_exec drivers: absolute path of the codehub binary on every
  # node. Empty (the default) makes jobs download it from this server's
  # /dl/codehub. Must stay empty with the docker driver.
  codehub_path = ""

  # docker driver: network mode of workspace and batch jobs, e.g. "host" for
  # an engine without a bridge network. Empty (the default) keeps Docker's.
  network_mode = ""

  # How often Nomad checks each workspace's health endpoint. It bounds how
  # fast a woken workspace is seen ready, so keep it short; Nomad's
  # minimum is 1s.
  check_interval = "1s"
}

# The other backend runs workspaces as local processes on this machine,
# without Nomad (development and single-machine use):
#
# backend "local" {
#   # Directory holding the workspace home directories.
#   data_dir = "/var/lib/codehub/workspaces"
#
#   # code-server binary: a path, or a name looked up on PATH. It listens on
#   # a free loopback port with the workspace's volume as HOME; the
#   # workspace command and args below apply to Nomad's exec and raw_exec.
#   # The workspace user must be able to run it.
#   code_server = "code-server"
#
#   # Unprivileged user (a name or a numeric uid) code-server runs as, with
#   # its primary group and no other; homes are given to it. Set it whenever
#   # codehub runs as root: a workspace's terminal is a shell as this user,
#   # and as root it could read this file and every other home. Every
#   # directory above data_dir and code_server must let it pass (o+x).
#   # Needs setpriv (util-linux). Empty (the default) runs workspaces as
#   # codehub's own user. Env: CODEHUB_BACKEND_LOCAL_USER.
#   user = "codehub-ws"
# }

# Consul resolves workspace addresses from its health checks. Optional: without
# this block, Nomad's native service discovery is used. An empty block
# (consul {}) enables Consul with the settings below or the environment.
#
# consul {
#   # Consul HTTP API. Env: CONSUL_HTTP_ADDR, then CODEHUB_CONSUL_ADDRESS.
#   address = "127.0.0.1:8500"
#
#   # ACL token (secret), default unset. Env: CONSUL_HTTP_TOKEN, then
#   # CODEHUB_CONSUL_TOKEN.
#   token = ""
#
#   # Datacenter to query; empty means the agent's own.
#   datacenter = ""
# }

workspace {
  # docker driver: the image a new workspace runs unless the user picks another.
  image = "codercom/code-server:4.100.3"

  # Other images users may pick. Empty (the default) allows image only;
  # when set, it must include image. Shown set, so not the default.
  allowed_images = ["codercom/code-server:4.100.3"]

  # docker driver: replaces the image's ENTRYPOINT; args follow it. The
  # default image's own ENTRYPOINT adds "--bind-addr 0.0.0.0:8080 ." to
  # every start, so the default runs its script alone. Set [] to keep the
  # ENTRYPOINT of another image (its workspaces then have no SSH: the
  # workspace agent is started in front of a known entrypoint).
  entrypoint = ["/usr/bin/entrypoint.sh"]

  # exec and raw_exec drivers: the program to run (the local backend runs
  # its code_server instead). The docker driver runs the image instead.
  command = "/usr/bin/code-server"

  # Arguments for the program (or the image's entrypoint). Two placeholders
  # are replaced when the workspace starts:
  #   %PORT%  the port the program must listen on: under docker's bridge
  #           networking, port below; otherwise the port Nomad assigns
  #   %HOME%  the workspace's home directory
  # They use percent signs because HCL itself interpolates ${...} and %{...}.
  # With upstream_auth = "code-server", --ignore-last-opened is added unless
  # present: code-server would otherwise reopen the folder it showed last,
  # and a restore can move a home (raw_exec homes are the volume's path).
  args = [
    "--bind-addr", "0.0.0.0:%PORT%",
    "--auth", "password",
    "--disable-telemetry",
    "--disable-update-check",
    "%HOME%",
  ]

  # How the workspace program knows codehub's proxy from anyone else who
  # reaches its port on the node:
  #   "code-server"  code-server's password auth, with its hashed password set
  #                  (through a Nomad Variable, never in the jobspec) to a
  #                  token only this workspace and codehub know; the proxy
  #                  sends it as code-server's session cookie. Needs
  #                  "--auth password" (code-server's default) in args.
  #   "none"         the port serves whoever reaches it: only for programs
  #                  that cannot check the token, on a network nobody else
  #                  can reach.
  upstream_auth = "code-server"

  # Port code-server listens on inside its container under docker's bridge
  # networking. With network_mode = "host" it is not used: the program
  # listens on the port Nomad assigns (%PORT%), so workspaces never collide
  # on a node.
  port = 8080

  # User and group the workspace runs as; the home volume is owned by them.
  uid = 1000
  gid = 1000

  # CPU in MHz and memory in MiB reserved for each workspace (Nomad needs
  # at least 10 MiB).
  cpu    = 500
  memory = 2048

  # A running workspace nobody has used for this long is stopped (standby).
  standby_ttl = "10m"

  # A workspace in standby for this long is archived to S3 and its volume freed.
  archive_ttl = "30m"

  # Owners may set their own workspace's timers, from 1m up to these.
  max_standby_ttl = "8h"
  max_archive_ttl = "168h"

  # Owners may keep a running workspace from its idle stop for up to this
  # long ahead ("extend"); "0s" turns that off.
  max_extend = "8h"

  # Owners may set an autostart schedule (weekdays and a time in their time
  # zone); an archived workspace is restored this long before, so it is
  # ready on time.
  autostart_lead = "15m"

  # Backups: a workspace in standby whose home changed since its last
  # archive is archived again once that archive is this old, and keeps its
  # volume, so a lost disk costs at most this much work. A running
  # workspace is backed up after it stops. "0s" (the default) turns
  # backups off; e.g. "24h". gc.keep_archives bounds how many are kept.
  backup_interval = "0s"

  # Snapshots: while a workspace runs, its agent reads the home once what
  # S3 holds of it is this old, and the server writes what changed to S3 as
  # an incremental archive. Losing the node then costs a running home at
  # most about this much work (docs/lifecycle.md). "0s" turns them off; at
  # least "5s" otherwise.
  snapshot_interval = "10m"
}

# Templates: the kinds of workspace users choose from when they create one.
# The workspace block above is always the template "default"; every field a
# template leaves out is taken from it. A template's change reaches a
# workspace at its next start, never while it runs.
template "go" {
  description = "Go service with more room"

  # docker driver: the image; exec and raw_exec: command (and args).
  image = "codercom/code-server:4.100.3"
  # command = "/usr/bin/code-server"
  # args    = ["--bind-addr", "0.0.0.0:%PORT%", "--auth", "password", "%HOME%"]

  # Resources: cpu in MHz, memory reserved and memory_max (the most it may
  # use; needs Nomad's memory oversubscription) in MiB.
  cpu        = 2000
  memory     = 4096
  memory_max = 8192

  # Added to the program's environment (HOME, PORT, HASHED_PASSWORD and
  # CODEHUB_* are codehub's own).
  env = {
    GOFLAGS = "-mod=mod"
  }

  # Idle timers of its workspaces, within max_standby_ttl and
  # max_archive_ttl above.
  standby_ttl = "30m"
  archive_ttl = "2h"

  # Who may use it: user names, and groups: "admins" (every administrator)
  # or groups of the identity provider (auth.oidc's groups_claim, as of the
  # user's last login). Both empty: everyone.
  users  = []
  groups = []

  # A string parameter holding a git URL cloned into the empty home at the
  # workspace's first start, before the program runs.
  repository_parameter = "repository"

  # Parameters the user gives at creation; each reaches the program as
  # CODEHUB_PARAM_<NAME>. type is "string" (default), "number" or "bool";
  # without a default a parameter is required.
  parameter "repository" {
    description = "Repository cloned into the home"
    default     = "https://github.com/golang/example.git"
    regex       = "(https|ssh|git|file)://.+"
  }
  parameter "go_version" {
    description = "Go version"
    default     = "1.22"
    options     = ["1.21", "1.22"]
  }
  parameter "workers" {
    type        = "number"
    description = "Build workers"
    default     = 4
    min         = 1
    max         = 16
  }
  parameter "race" {
    type        = "bool"
    description = "Build with the race detector"
    default     = false
  }

  # Prebuilt homes (docs/templates.md): init runs in the checkout after a
  # first start's clone. A prebuild does that once, ahead of time, with
  # every parameter's default (so each needs one), and a new workspace with
  # the defaults starts from the newest prebuilt home instead of cloning,
  # its checkout brought up to its branch. A prebuild is made when the
  # template's version has none, every `every` (at least 10m; empty: only
  # then and on an admin's request), and on an admin's request; the newest
  # `keep` (1 to 10, default 2) are kept.
  prebuild {
    init  = ["go mod download", "go build ./..."]
    every = "24h"
    keep  = 2
  }

  # Homes kept ready for new workspaces with the default parameters (0 to
  # 100, default 0): volumes provisioned on eligible nodes, holding the
  # newest prebuilt home (an empty one without a prebuild block). Creating
  # a workspace claims one and starts it as a wake does; the pool refills.
  warm = 2
}

template "small" {
  description = "A small workspace for notes and scripts"
  cpu         = 250
  memory      = 1024
}

limits {
  # Workspaces one user may have running at once.
  max_running_per_user = 2

  # Workspaces that may run at once across all users.
  max_running_global = 100
}

# The coordinator's workspace controller (runs on the elected leader only).
coordinator {
  # Pause between passes when nothing is in flight.
  idle_interval = "15s"

  # Pause between passes while an operation is in flight; at most idle_interval.
  active_interval = "1s"

  # How often workspaces idle past their standby_ttl or archive_ttl are
  # looked for. A workspace stops at most this long (plus the proxy's 30 s
  # activity flush) after its standby_ttl.
  ttl_interval = "1m"

  # How long each operation may take before the workspace is marked
  # failed with reason Timeout.
  provision_timeout = "5m"  # creating the home volume
  start_timeout     = "10m" # starting code-server, image pull included
  stop_timeout      = "2m"  # stopping the container
  archive_timeout   = "1h"  # uploading the home volume to S3
  restore_timeout   = "1h"  # restoring the home volume from S3
  delete_timeout    = "5m"  # removing container and volume

  # Retries after a failed operation wait backoff_base, doubling each time,
  # never more than backoff_max.
  backoff_base = "5s"
  backoff_max  = "5m"

  # Homes moving at once off nodes an admin evacuates or Nomad drains,
  # each one archive and one restore through S3 (docs/nomad.md,
  # "Operating a fleet").
  evacuation_parallel = 2

  # Workspaces a controller pass acts on at once (volumes, jobs, database
  # writes), each one by itself: a wave of starts, as autostart makes at
  # nine, goes this many at a time (docs/lifecycle.md, "Coordinator").
  parallel = 8
}

# Garbage collection of archives nobody can reach any more.
gc {
  # Pause between collection runs.
  interval = "4h"

  # Archives kept per live workspace, newest first (at least 1).
  keep_archives = 3

  # How long a deleted workspace's archives are kept after its deletion.
  deleted_grace = "2h"

  # Only log what would be removed.
  dry_run = false
}

auth {
  # Lifetime of a login session.
  session_ttl = "24h"

  # First administrator, created at start when no user exists yet and a
  # password is set (8 to 1024 characters).
  bootstrap_admin {
    # Login name of the first administrator: 1 to 63 of a-z, 0-9, '.', '_'
    # and '-', starting with a letter or digit.
    username = "admin"

    # Password (secret), default unset: then no administrator is created.
    # Env: CODEHUB_AUTH_BOOTSTRAP_ADMIN_PASSWORD.
    # password = ""
  }

  # Offer the login with a local username and password. Turn it off when
  # everyone signs in through auth.oidc (which must be set then); local
  # users then cannot log in. Env: CODEHUB_AUTH_PASSWORD_LOGIN.
  password_login = true

  # Single sign-on through an OpenID Provider (authorization code flow with
  # PKCE). It is on when issuer is set. Register codehub at the provider as a
  # confidential web client with the redirect URI
  # <public_url>/api/v1/auth/oidc/callback.
  oidc {
    # Issuer URL of the provider, where discovery starts: https://, or
    # http:// to a provider on loopback. Env: CODEHUB_AUTH_OIDC_ISSUER.
    # issuer = "https://idp.example.com/realms/company"

    # The client registered at the provider. The secret is a secret: keep
    # it in CODEHUB_AUTH_OIDC_CLIENT_SECRET rather than here.
    # client_id     = "codehub"
    # client_secret = ""

    # Scopes asked for; must include "openid". Add the scope that makes
    # your provider give out the groups (often "groups").
    scopes = ["openid", "profile", "email"]

    # Both claims below are read from the ID token or, where it lacks them,
    # from the provider's UserInfo endpoint (docs/identity.md).

    # Claim whose value becomes the username at first login (it must be a
    # valid codehub username). Users are known by the provider's issuer and
    # subject, so a later change of this claim renames nobody.
    username_claim = "preferred_username"

    # Claim listing the user's groups.
    groups_claim = "groups"

    # When not empty, only members of one of these groups may log in; a
    # user removed from them is refused at the next login, which also ends
    # their sessions.
    allowed_groups = []

    # Members of these groups are administrators; checked at every login,
    # so leaving the group takes the rights away at the next login.
    admin_groups = []

    # Shown on the login page as "Sign in with <label>".
    label = "single sign-on"
  }
}

# The audit log in PostgreSQL: logins, workspace actions and admin actions.
audit {
  # How long events are kept: whole days ("90d") or a duration ("720h").
  # Older events are pruned every hour. Env: CODEHUB_AUDIT_RETENTION.
  retention = "90d"
}

# Prometheus metrics are never served to the public: either on a listener of
# their own, or on the main listener to a bearer token. With neither set,
# /metrics is not served.
metrics {
  # host:port of a listener that serves only /metrics. Empty (the default)
  # opens none. Env: CODEHUB_METRICS_LISTEN.
  listen = ""

  # Bearer token (secret), default unset: when set, the main listener
  # serves /metrics to requests with "Authorization: Bearer <token>".
  # Env: CODEHUB_METRICS_TOKEN.
  # token = ""
}

jobspecs {
  # Directory with jobspec template overrides: each of workspace.nomad.hcl,
  # archive.nomad.hcl and restore.nomad.hcl there replaces the built-in one,
  # and the defines of _helpers.tpl there replace the built-in helpers of
  # the same name (docs/nomad.md, "Jobspec templates"). Empty uses the
  # built-in templates.
  dir = ""
}

proxy {
  # Serve each workspace on its own subdomain, {id}.<subdomain_base>, so
  # nothing a workspace serves runs on the dashboard's origin. A host name
  # without scheme or port: "localhost" works on one machine (browsers
  # resolve every *.localhost name to loopback); a deployment uses a name
  # with wildcard DNS and certificate, e.g. "ws.example.com". Empty (the
  # default) serves workspaces under /w/{id}/ on the dashboard's origin,
  # where their pages can call the API as the user (docs/architecture.md).
  # Shown set, so not the default.
  subdomain_base = "localhost"

  # Domain attribute of the session cookie. Empty (the default) keeps the
  # cookie on the dashboard's host; each workspace host then gets a session
  # of its own, handed over from the dashboard's when it is opened. Set it
  # only to share the dashboard's cookie with the workspace hosts (it must
  # cover both, e.g. "example.com" for codehub.example.com and
  # *.ws.example.com).
  cookie_domain = ""

  # Addresses or CIDR ranges of reverse proxies in front of codehub whose
  # X-Forwarded-* headers are trusted. Empty (the default) trusts none.
  trusted_proxies = []

  # The widest share level an owner may give a port of their workspace
  # ({port}--{id}.<subdomain_base>): "owner" (the default: nobody else),
  # "authenticated" (any logged-in user) or "public" (anyone, without a
  # login). Path mode allows "owner" only, whatever this says.
  max_port_share = "owner"
}

// Package firststart owns what happens in a workspace's home before its
// program runs for the first time: the template's repository and the
// owner's dotfiles are cloned into an empty home, and the dotfiles'
// install script is run. Both backends run the same shell script, Nomad
// as a prestart task of the workspace job, the local backend in front of
// the program. It never reads a credential from anywhere but its own
// environment, and never passes one to the program.
package firststart

import "strings"

// Environment variables the script reads. GitToken is a secret: it is
// removed from the environment before the program or an install script
// runs.
const (
	EnvRepository = "CODEHUB_REPOSITORY"
	EnvDotfiles   = "CODEHUB_DOTFILES"
	EnvGitToken   = "CODEHUB_GIT_TOKEN"
	// EnvHome, when set, is the home to prepare, and HOME for everything
	// the script runs: Nomad's exec driver sets HOME to the task user's
	// home in the node's user database, whatever the job says.
	EnvHome = "CODEHUB_HOME"
	// EnvGitTokenFile names a file the credential came in (Nomad's
	// rendered template), removed before any user code runs.
	EnvGitTokenFile = "CODEHUB_GIT_TOKEN_FILE"
	// EnvInit holds the template's init commands, one per line, run in
	// the checkout after a first start's clone.
	EnvInit = "CODEHUB_INIT"
	// EnvPrebuild, set to 1, makes this first start a prebuild's: once
	// init has run, the home is marked prebuilt (PrebuiltMarker) and the
	// commit checked out is written to the file EnvCommitFile names.
	EnvPrebuild   = "CODEHUB_PREBUILD"
	EnvCommitFile = "CODEHUB_COMMIT_FILE"
)

// Env is the script's environment, NAME=value each: the repository and
// dotfiles to clone, the git credential (a secret: only where the backend
// keeps secrets), the template's init commands and, for a prebuild's
// start, the file that gets the commit it built ("": not a prebuild).
func Env(repository, dotfiles, gitToken string, init []string, commitFile string) []string {
	env := []string{EnvRepository + "=" + repository, EnvDotfiles + "=" + dotfiles}
	if gitToken != "" {
		env = append(env, EnvGitToken+"="+gitToken)
	}
	if len(init) > 0 {
		env = append(env, EnvInit+"="+strings.Join(init, "\n"))
	}
	if commitFile != "" {
		env = append(env, EnvPrebuild+"=1", EnvCommitFile+"="+commitFile)
	}
	return env
}

// PrebuiltMarker is the file, at the top of a home, that marks it as a
// prebuilt home not yet started by its owner. It holds the checkout's
// directory name. The start that finds it brings the checkout up to its
// branch and adds the owner's dotfiles, then removes it.
const PrebuiltMarker = ".codehub-prebuilt"

// Script prepares $HOME: when it is empty (a first start) it clones
// $CODEHUB_REPOSITORY into a directory named after it and
// $CODEHUB_DOTFILES into .dotfiles, then runs the first of the dotfiles'
// install.sh, install, bootstrap.sh, setup.sh that is executable. A failed
// clone or install empties the home again, so the next attempt is a first
// start too, and exits with git's (or the script's) status; its messages
// are on stderr. Given more arguments, it then runs them as the program,
// without the variables above.
//
// The credential is used by the clones alone. Before the install script
// runs, the file it came in ($CODEHUB_GIT_TOKEN_FILE) is removed (a file
// that stays fails the start, undoing a first start's clones but never
// touching a used home) and the shell replaces itself with one
// started without it: unsetting a variable does not change what
// /proc/<pid>/environ shows of a process's start, which any process of
// the same user can read. git is given the helper on its command line
// only, so no configuration in the home holds it.
//
// Run it as: sh -c Script sh [program args...]. It writes no "${", which
// Nomad would take for its own interpolation.
const Script = `
home=$HOME
if [ -n "$CODEHUB_HOME" ]; then
  home=$CODEHUB_HOME
  export HOME="$home"
fi
step=none
checkout=
if [ -n "$CODEHUB_REPOSITORY" ]; then
  checkout=$(basename "$CODEHUB_REPOSITORY" .git)
fi
if [ "$CODEHUB_PREBUILD" = 1 ] && [ -f "$home/` + PrebuiltMarker + `" ]; then
  # An earlier attempt of this prebuild built the home.
  checkout=$(cat "$home/` + PrebuiltMarker + `")
  status=0
  step=built
elif [ -f "$home/` + PrebuiltMarker + `" ]; then
  checkout=$(cat "$home/` + PrebuiltMarker + `")
  (
    export GIT_TERMINAL_PROMPT=0
    helper=
    if [ -n "$CODEHUB_GIT_TOKEN" ]; then
      helper='!f() { echo username=x-access-token; echo "password=$CODEHUB_GIT_TOKEN"; }; f'
    fi
    if [ -n "$checkout" ] && [ -d "$home/$checkout/.git" ]; then
      echo "codehub: bringing the prebuilt checkout $home/$checkout up to its branch" >&2
      if ! { git -C "$home/$checkout" -c credential.helper= -c "credential.helper=$helper" fetch --quiet >&2 &&
        git -C "$home/$checkout" merge --ff-only --quiet '@{upstream}' >&2; }; then
        echo "codehub: the checkout stays at the prebuild's commit (fetch or fast-forward failed); nothing was discarded" >&2
      fi
    fi
    if [ -n "$CODEHUB_DOTFILES" ] && [ ! -e "$home/.dotfiles" ]; then
      echo "codehub: cloning dotfiles $CODEHUB_DOTFILES into $home/.dotfiles" >&2
      git -c credential.helper= -c "credential.helper=$helper" clone --quiet -- "$CODEHUB_DOTFILES" "$home/.dotfiles" >&2
    fi
  )
  status=$?
  step=prebuilt
  if [ "$status" -eq 0 ] && [ -n "$CODEHUB_DOTFILES" ]; then
    step=prebuilt-install
  fi
elif { [ -n "$CODEHUB_REPOSITORY" ] || [ -n "$CODEHUB_DOTFILES" ]; } && [ -z "$(ls -A "$home")" ]; then
  (
    set -e
    cd "$home"
    export GIT_TERMINAL_PROMPT=0
    helper=
    if [ -n "$CODEHUB_GIT_TOKEN" ]; then
      helper='!f() { echo username=x-access-token; echo "password=$CODEHUB_GIT_TOKEN"; }; f'
    fi
    if [ -n "$CODEHUB_REPOSITORY" ]; then
      echo "codehub: cloning $CODEHUB_REPOSITORY into $home/$checkout" >&2
      git -c credential.helper= -c "credential.helper=$helper" clone --quiet -- "$CODEHUB_REPOSITORY" "$checkout" >&2
    fi
    if [ -n "$CODEHUB_DOTFILES" ]; then
      echo "codehub: cloning dotfiles $CODEHUB_DOTFILES into $home/.dotfiles" >&2
      git -c credential.helper= -c "credential.helper=$helper" clone --quiet -- "$CODEHUB_DOTFILES" .dotfiles >&2
    fi
  )
  status=$?
  step=cloned
  if [ "$status" -eq 0 ] && [ -n "$CODEHUB_DOTFILES" ]; then
    step=install
  fi
fi
if [ -n "$CODEHUB_GIT_TOKEN_FILE" ]; then
  rm -f -- "$CODEHUB_GIT_TOKEN_FILE"
  if [ -e "$CODEHUB_GIT_TOKEN_FILE" ]; then
    echo "codehub: cannot remove the credential file $CODEHUB_GIT_TOKEN_FILE; no user code runs while it is there" >&2
    if [ "$step" = none ]; then
      exit 1
    fi
    if [ "$status" -eq 0 ]; then
      status=1
    fi
  fi
fi
unset CODEHUB_REPOSITORY CODEHUB_DOTFILES CODEHUB_GIT_TOKEN CODEHUB_GIT_TOKEN_FILE CODEHUB_HOME
case "$step" in
prebuilt*)
  if [ "$status" -ne 0 ]; then
    echo "codehub: first start of a prebuilt home failed (status $status); the next attempt tries again" >&2
    exit "$status"
  fi
  ;;
none) ;;
*)
  if [ "$status" -ne 0 ]; then
    echo "codehub: first start failed (status $status); the home is emptied for the next attempt" >&2
    find "$home" -mindepth 1 -delete
    exit "$status"
  fi
  ;;
esac
exec /bin/sh -c '` + installScript + `' sh "$step" "$checkout" "$@"
`

// installScript is the rest of Script, run by a shell that never had the
// credential: $1 is the step (none; cloned or install after a first
// start's clones; prebuilt or prebuilt-install in a prebuilt home; built
// in a prebuild's home an earlier attempt built), $2 the
// checkout's directory, the other arguments are the program. Init and the
// dotfiles' install script are user code and run here. A failure in a
// first start empties the home, as a failed clone does; in a prebuilt
// home it removes only the dotfiles, so the next attempt adds them again.
// It holds no single quote, since Script passes it as one quoted word.
const installScript = `
step=$1
checkout=$2
shift 2
fail() {
  status=$1
  case "$step" in
  prebuilt*)
    echo "codehub: first start of a prebuilt home failed (status $status); the next attempt tries again" >&2
    rm -rf "$HOME/.dotfiles"
    ;;
  *)
    echo "codehub: first start failed (status $status); the home is emptied for the next attempt" >&2
    find "$HOME" -mindepth 1 -delete
    ;;
  esac
  exit "$status"
}
case "$step" in
cloned|install)
  if [ -n "$CODEHUB_INIT" ]; then
    echo "codehub: running the template init commands in $HOME/$checkout" >&2
    (cd "$HOME/$checkout" && /bin/sh -ec "$CODEHUB_INIT") >&2 || fail "$?"
    if [ "$CODEHUB_PREBUILD" = 1 ]; then
      printf %s "$checkout" > "$HOME/` + PrebuiltMarker + `" || fail "$?"
    fi
  fi
  ;;
esac
if [ "$CODEHUB_PREBUILD" = 1 ] && [ -n "$CODEHUB_COMMIT_FILE" ]; then
  commit=$(git -C "$HOME/$checkout" rev-parse HEAD) || fail "$?"
  printf "%s\n" "$commit" > "$CODEHUB_COMMIT_FILE" || fail "$?"
  echo "codehub: prebuilt $HOME/$checkout at commit $commit" >&2
fi
case "$step" in
install|prebuilt-install)
  for script in install.sh install bootstrap.sh setup.sh; do
    if [ -f "$HOME/.dotfiles/$script" ] && [ -x "$HOME/.dotfiles/$script" ]; then
      echo "codehub: running .dotfiles/$script" >&2
      (cd "$HOME/.dotfiles" && "./$script") >&2 || fail "$?"
      break
    fi
  done
  ;;
esac
case "$step" in
prebuilt*) rm -f "$HOME/` + PrebuiltMarker + `" ;;
esac
unset CODEHUB_INIT CODEHUB_PREBUILD CODEHUB_COMMIT_FILE
if [ "$#" -gt 0 ]; then
  exec "$@"
fi
`

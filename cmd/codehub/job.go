package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/codehub-io/codehub/archive"
)

// jobEnv is what `codehub job` reads from its environment; batch jobs get it
// from their jobspec and a Nomad Variable, never from flags (flags show up
// in process listings and the Nomad UI).
type jobEnv struct {
	url    string
	client archive.ClientConfig
	// parent is the key of the archive an archive builds on
	// (CODEHUB_ARCHIVE_PARENT; the --parent flag wins).
	parent string
}

func readJobEnv(getenv func(string) string) (jobEnv, error) {
	env := jobEnv{
		url:    getenv("ARCHIVE_URL"),
		parent: getenv("CODEHUB_ARCHIVE_PARENT"),
		client: archive.ClientConfig{
			Endpoint:  getenv("S3_ENDPOINT"),
			AccessKey: getenv("S3_ACCESS_KEY"),
			SecretKey: getenv("S3_SECRET_KEY"),
			Region:    getenv("S3_REGION"),
		},
	}
	if env.url == "" || env.client.Endpoint == "" {
		return jobEnv{}, errors.New("ARCHIVE_URL and S3_ENDPOINT must be set")
	}
	if v := getenv("S3_USE_SSL"); v != "" {
		ssl, err := strconv.ParseBool(v)
		if err != nil {
			return jobEnv{}, fmt.Errorf("S3_USE_SSL=%q: %w", v, err)
		}
		env.client.UseSSL = ssl
	}
	return env, nil
}

// stopArchiveAsked reports whether a workspace's stop-archive task is to
// archive: its variable, which codehub removes before any stop of its own,
// names the run the task belongs to. A stop of an older run's program, by
// a newer run replacing it, archives nothing either.
func stopArchiveAsked(getenv func(string) string) bool {
	run := getenv("CODEHUB_RUN_ID")
	return run != "" && getenv("CODEHUB_STOP_ARCHIVE_RUN") == run
}

// runJob implements `codehub job archive [--on-stop] [--parent KEY]
// [--commit-file FILE] --src DIR` and
// `codehub job restore --dst DIR`. Stdout carries the key=value lines the
// controller reads (the last one is RESULT=OK or RESULT=FAIL with
// CODEHUB_ERROR, or RESULT=SKIPPED for a stop archive not asked for);
// stderr carries diagnostic logs. Exit 0 on success, 1 on
// any failure, except a stop archive's failure once codehub gave it up
// (SIGUSR1).
func runJob(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "archive" && args[0] != "restore") {
		fmt.Fprintln(stderr, "usage: codehub job archive [--on-stop] [--parent KEY] --src DIR | codehub job restore --dst DIR")
		return 1
	}
	kind := args[0]
	if os.Getenv("GOGC") == "" {
		// The data mover's heap is a few long-lived buffers and little
		// garbage: collecting at 25 % growth instead of 100 % keeps its peak
		// RSS near those buffers instead of twice them, at little CPU cost.
		debug.SetGCPercent(25)
	}
	flags := flag.NewFlagSet("job "+kind, flag.ContinueOnError)
	flags.SetOutput(stderr)
	dirFlag, dirHelp := "src", "directory to archive"
	if kind == "restore" {
		dirFlag, dirHelp = "dst", "directory whose contents the archive replaces"
	}
	dir := flags.String(dirFlag, "", dirHelp)
	onStop, parent, commitFile := false, "", ""
	if kind == "archive" {
		flags.BoolVar(&onStop, "on-stop", false, "archive only if this run's stop is to be archived (a workspace's stop-archive task)")
		flags.StringVar(&parent, "parent", "", "key of an earlier archive of this home to store only the changes since (default $CODEHUB_ARCHIVE_PARENT)")
		flags.StringVar(&commitFile, "commit-file", "", "file holding the commit a prebuild built; ARCHIVE_URL is then the prebuild's prefix, completed with the commit")
	}
	if err := flags.Parse(args[1:]); err != nil {
		return 1
	}
	if onStop && !stopArchiveAsked(os.Getenv) {
		archive.WriteFields(stdout, "CODEHUB_JOB", kind, "ARCHIVE_URL", os.Getenv("ARCHIVE_URL"))
		archive.WriteFields(stdout, "RESULT", archive.ResultSkipped)
		return 0
	}
	env, err := readJobEnv(os.Getenv)
	if err == nil && *dir == "" {
		err = fmt.Errorf("--%s is required", dirFlag)
	}
	if parent != "" {
		env.parent = parent
	}
	commit := ""
	if err == nil && commitFile != "" {
		commit, env.url, err = prebuildURL(env.url, commitFile)
	}
	archive.WriteFields(stdout, "CODEHUB_JOB", kind, "ARCHIVE_URL", env.url)
	if err != nil {
		return jobFailed(stdout, err)
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "job-" + kind, Output: stderr, Level: hclog.Info})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var givenUp atomic.Bool
	if onStop {
		ctx = giveUpOn(ctx, syscall.SIGUSR1, &givenUp)
	}
	if err := moveArchive(ctx, logger, env, kind, *dir, stdout); err != nil {
		code := jobFailed(stdout, err)
		if givenUp.Load() {
			// The failure is the task's result: Nomad runs it no more.
			return 0
		}
		return code
	}
	if commit != "" {
		archive.WriteFields(stdout, "RESULT", "OK", "ARCHIVE_URL", env.url, "COMMIT", commit)
		return 0
	}
	archive.WriteFields(stdout, "RESULT", "OK", "ARCHIVE_URL", env.url)
	return 0
}

// prebuildURL reads the commit a prebuild's build wrote to file and
// returns it with the URL of the prebuilt home's archive: prefixURL
// (archive.PrebuildPrefix) completed by the commit. A build that wrote no
// valid commit did not finish.
func prebuildURL(prefixURL, file string) (commit, url string, err error) {
	bucket, prefix, err := archive.ParseURL(prefixURL)
	if err != nil {
		return "", prefixURL, err
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", prefixURL, &archive.Error{Code: archive.CodeBuildFailed, Err: fmt.Errorf("read the built commit: %w", err)}
	}
	commit = strings.TrimSpace(string(b))
	if !archive.ValidCommit(commit) {
		// What the file holds is the build's: never repeated.
		return "", prefixURL, &archive.Error{Code: archive.CodeBuildFailed, Err: fmt.Errorf("%s holds no commit (40 or 64 hex digits)", file)}
	}
	return commit, archive.URL(bucket, archive.PrebuildKey(prefix, commit)), nil
}

// giveUpOn returns a context that sig ends, with givenUp set. A stop
// archive fails with exit 1 and Nomad runs it again (its restart policy's
// mode is delay) for as long as S3 is away: the allocation, and a drain of
// its node, ends only once the home is in S3. codehub sends sig only on a
// node in service, once the stop has taken its stop timeout; the attempt
// then ends with its failure as the task's result, and a backup saves the
// home later.
func giveUpOn(parent context.Context, sig os.Signal, givenUp *atomic.Bool) context.Context {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sig)
	go func() {
		defer signal.Stop(ch)
		select {
		case <-ch:
			givenUp.Store(true)
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx
}

func moveArchive(ctx context.Context, logger hclog.Logger, env jobEnv, kind, dir string, stdout io.Writer) error {
	bucket, key, err := archive.ParseURL(env.url)
	if err != nil {
		return err
	}
	client, err := archive.NewClient(env.client)
	if err != nil {
		return &archive.Error{Code: archive.CodeS3Access, Err: err}
	}
	store := archive.NewStore(logger, client, bucket)
	if kind == "archive" {
		_, err = store.ArchiveFrom(ctx, dir, key, env.parent, stdout)
	} else {
		_, err = store.Restore(ctx, key, dir, stdout)
	}
	return err
}

func jobFailed(stdout io.Writer, err error) int {
	archive.WriteFields(stdout, "RESULT", "FAIL", "CODEHUB_ERROR", string(archive.CodeOf(err)), "DETAIL", err.Error())
	return 1
}

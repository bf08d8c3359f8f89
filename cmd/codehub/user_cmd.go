package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/codehub-io/codehub/config"
	"github.com/codehub-io/codehub/identity"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

const userUsage = `usage:
  codehub user add    -config FILE -username NAME -password-stdin [-admin]
  codehub user passwd -config FILE -username NAME -password-stdin
  codehub user list   -config FILE
  codehub user delete -config FILE -username NAME`

// Password lengths in characters: the minimum keeps trivially guessable
// passwords out; the maximum keeps every password usable at the login,
// whose request body is capped.
const (
	minPasswordLength = identity.MinPasswordLength
	maxPasswordLength = identity.MaxPasswordLength
)

// userFlags are the flags each subcommand takes. Any other flag is refused,
// not ignored: `passwd -admin` must not quietly leave the role as it was.
var userFlags = map[string][]string{
	"add":    {"config", "username", "password-stdin", "admin"},
	"passwd": {"config", "username", "password-stdin"},
	"list":   {"config"},
	"delete": {"config", "username"},
}

// runUser manages local users: add, passwd, list, delete.
func runUser(args []string, stdout, stderr io.Writer, stdin io.Reader) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, userUsage)
		return 2
	}
	sub := args[0]
	allowed, known := userFlags[sub]
	if !known {
		fmt.Fprintf(stderr, "codehub user: unknown subcommand %q\n%s\n", sub, userUsage)
		return 2
	}
	fs, path := configFlags("user "+sub, stderr)
	username := fs.String("username", "", "the user's name")
	fromStdin := fs.Bool("password-stdin", false, "read the password from the first line of standard input")
	admin := fs.Bool("admin", false, "make the user an administrator")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if problem := misusedUserFlags(fs, allowed); problem != "" {
		fmt.Fprintf(stderr, "codehub user %s: %s\n%s\n", sub, problem, userUsage)
		return 2
	}
	needName := slices.Contains(allowed, "username")
	needPassword := slices.Contains(allowed, "password-stdin")
	switch {
	case needName && !config.ValidUsername(*username):
		fmt.Fprintln(stderr, "codehub user: -username must be 1-63 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit")
		return 2
	case needPassword && !*fromStdin:
		fmt.Fprintln(stderr, "codehub user: -password-stdin is required (the password is never taken from the command line)")
		return 2
	case *path == "":
		fmt.Fprintf(stderr, "codehub user %s: -config FILE is required\n", sub)
		return 2
	}
	var password string
	if needPassword {
		var err error
		if password, err = readPassword(stdin); err != nil {
			fmt.Fprintf(stderr, "codehub user: %v\n", err)
			return 2
		}
	}
	ctx, pool, closeDB, ok := adminDB("codehub user", *path, stderr)
	if !ok {
		return 1
	}
	defer closeDB()
	var err error
	switch sub {
	case "add":
		err = addUser(ctx, pool, *username, password, *admin, stdout)
	case "passwd":
		err = setPassword(ctx, pool, *username, password, stdout)
	case "list":
		err = listUsers(ctx, pool, stdout)
	case "delete":
		err = deleteUser(ctx, pool, *username, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "codehub user %s: %v\n", sub, err)
		return 1
	}
	return 0
}

// misusedUserFlags describes the first argument the subcommand would
// otherwise ignore: a positional one, or a flag it does not take.
func misusedUserFlags(fs *flag.FlagSet, allowed []string) string {
	if fs.NArg() > 0 {
		return fmt.Sprintf("unexpected argument %q", fs.Arg(0))
	}
	var problem string
	fs.Visit(func(f *flag.Flag) {
		if problem == "" && !slices.Contains(allowed, f.Name) {
			problem = fmt.Sprintf("-%s does not apply", f.Name)
		}
	})
	return problem
}

// readPassword takes the first line of r, without its line ending. It reads
// no more than the longest allowed password could take, so an endless
// stream is refused rather than held in memory.
func readPassword(r io.Reader) (string, error) {
	const maxLineBytes = maxPasswordLength*utf8.UTFMax + len("\r\n")
	line, err := bufio.NewReader(io.LimitReader(r, int64(maxLineBytes)+1)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read password: %w", err)
	}
	tooLong := fmt.Errorf("the password must have at most %d characters", maxPasswordLength)
	if len(line) > maxLineBytes {
		return "", tooLong
	}
	line = strings.TrimRight(line, "\r\n")
	// The login form sends UTF-8, so other bytes could never be typed there.
	if !utf8.ValidString(line) {
		return "", errors.New("the password must be UTF-8 text")
	}
	switch n := utf8.RuneCountInString(line); {
	case n < minPasswordLength:
		return "", fmt.Errorf("the password must have at least %d characters", minPasswordLength)
	case n > maxPasswordLength:
		return "", tooLong
	}
	return line, nil
}

func addUser(ctx context.Context, pool *pgxpool.Pool, username, password string, admin bool, stdout io.Writer) error {
	hash, err := identity.HashPassword(password)
	if err != nil {
		return err
	}
	u, err := store.CreateUser(ctx, pool, workspace.NewID(), username, hash, admin)
	if errors.Is(err, store.ErrUsernameTaken) {
		return fmt.Errorf("user %q already exists (use passwd to change the password)", username)
	}
	if err != nil {
		return err
	}
	role := "user"
	if admin {
		role = "administrator"
	}
	fmt.Fprintf(stdout, "added %s %s (id %s)\n", role, u.Username, u.ID)
	return nil
}

// setPassword resets a local user's password as an administrator's reset
// does: every session, API token and pending CLI login of the user ends.
func setPassword(ctx context.Context, pool *pgxpool.Pool, username, password string, stdout io.Writer) error {
	_, err := identity.New(hclog.NewNullLogger(), pool, identity.Options{}).ResetPassword(ctx, username, password)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no user %q", username)
	} else if errors.Is(err, store.ErrSingleSignOn) {
		return fmt.Errorf("user %q signs in through single sign-on and has no password", username)
	} else if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "password of %s changed; its sessions and API tokens are ended\n", username)
	return nil
}

func listUsers(ctx context.Context, pool *pgxpool.Pool, stdout io.Writer) error {
	users, err := store.ListUsers(ctx, pool)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "USERNAME\tID\tADMIN\tDISABLED\tSIGN-IN\tCREATED")
	for _, u := range users {
		signIn := "password"
		if u.OIDCSubject != nil {
			signIn = "oidc"
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%v\t%s\t%s\n", u.Username, u.ID, u.IsAdmin, u.Disabled, signIn, u.CreatedAt.UTC().Format("2006-01-02T15:04:05Z"))
	}
	return tw.Flush()
}

func deleteUser(ctx context.Context, pool *pgxpool.Pool, username string, stdout io.Writer) error {
	err := store.DeleteUser(ctx, pool, username)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("no user %q", username)
	case errors.Is(err, store.ErrConflict):
		return fmt.Errorf("%w; delete the user's workspaces first", err)
	case err != nil:
		return err
	}
	fmt.Fprintf(stdout, "deleted user %s\n", username)
	return nil
}

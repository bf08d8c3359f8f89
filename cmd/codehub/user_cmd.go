package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/codehub-io/codehub/api"
	"github.com/codehub-io/codehub/store"
	"github.com/codehub-io/codehub/workspace"
)

const userUsage = `usage:
  codehub user add    -config FILE -username NAME -password-stdin [-admin]
  codehub user passwd -config FILE -username NAME -password-stdin
  codehub user list   -config FILE
  codehub user delete -config FILE -username NAME`

// usernamePattern mirrors the users table's CHECK constraint.
var usernamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// minPasswordLength keeps trivially guessable passwords out.
const minPasswordLength = 8

// runUser manages local users: add, passwd, list, delete.
func runUser(args []string, stdout, stderr io.Writer, stdin io.Reader) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, userUsage)
		return 2
	}
	sub := args[0]
	fs, path := configFlags("user "+sub, stderr)
	username := fs.String("username", "", "the user's name")
	fromStdin := fs.Bool("password-stdin", false, "read the password from the first line of standard input")
	admin := fs.Bool("admin", false, "make the user an administrator")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	needName := sub == "add" || sub == "passwd" || sub == "delete"
	needPassword := sub == "add" || sub == "passwd"
	switch {
	case sub != "add" && sub != "passwd" && sub != "list" && sub != "delete":
		fmt.Fprintf(stderr, "codehub user: unknown subcommand %q\n%s\n", sub, userUsage)
		return 2
	case needName && !usernamePattern.MatchString(*username):
		fmt.Fprintln(stderr, "codehub user: -username must be 1-63 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit")
		return 2
	case needPassword && !*fromStdin:
		fmt.Fprintln(stderr, "codehub user: -password-stdin is required (the password is never taken from the command line)")
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

// readPassword takes the first line of r, without its line ending.
func readPassword(r io.Reader) (string, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read password: %w", err)
	}
	line = strings.TrimRight(line, "\r\n")
	if len(line) < minPasswordLength {
		return "", fmt.Errorf("the password must have at least %d characters", minPasswordLength)
	}
	return line, nil
}

func addUser(ctx context.Context, pool *pgxpool.Pool, username, password string, admin bool, stdout io.Writer) error {
	hash, err := api.HashPassword(password)
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

func setPassword(ctx context.Context, pool *pgxpool.Pool, username, password string, stdout io.Writer) error {
	hash, err := api.HashPassword(password)
	if err != nil {
		return err
	}
	if err := store.SetPassword(ctx, pool, username, hash); errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no user %q", username)
	} else if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "password of %s changed; its sessions are ended\n", username)
	return nil
}

func listUsers(ctx context.Context, pool *pgxpool.Pool, stdout io.Writer) error {
	users, err := store.ListUsers(ctx, pool)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "USERNAME\tID\tADMIN\tCREATED")
	for _, u := range users {
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\n", u.Username, u.ID, u.IsAdmin, u.CreatedAt.UTC().Format("2006-01-02T15:04:05Z"))
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

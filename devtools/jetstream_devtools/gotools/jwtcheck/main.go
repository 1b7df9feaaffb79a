// Reads NATS JWTs, one per line on stdin, and prints what github.com/nats-io/jwt/v2 (the library
// nats-server and nsc use) makes of each, as one JSON line: its decoding (which checks the
// signature) and its own validation. Exits 1 if any token fails to decode or has a blocking issue.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/jwt/v2"
)

type issue struct {
	Description string `json:"description"`
	Blocking    bool   `json:"blocking"`
	TimeCheck   bool   `json:"time_check"`
}

type result struct {
	Type    string  `json:"type"`
	Subject string  `json:"subject"`
	Issuer  string  `json:"issuer"`
	Issues  []issue `json:"issues"`
	Error   string  `json:"error"`
}

func check(token string) (result, bool) {
	out := result{Issues: []issue{}}
	claims, err := jwt.Decode(token)
	if err != nil {
		out.Error = err.Error()
		return out, false
	}
	data := claims.Claims()
	out.Type, out.Subject, out.Issuer = string(claims.ClaimType()), data.Subject, data.Issuer
	results := jwt.ValidationResults{}
	claims.Validate(&results)
	ok := true
	for _, found := range results.Issues {
		out.Issues = append(out.Issues, issue{found.Description, found.Blocking, found.TimeCheck})
		ok = ok && !found.Blocking
	}
	return out, ok
}

func main() {
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	encoder := json.NewEncoder(os.Stdout)
	failed := false
	for scanner.Scan() {
		token := strings.TrimSpace(scanner.Text())
		if token == "" {
			continue
		}
		out, ok := check(token)
		failed = failed || !ok
		if err := encoder.Encode(out); err != nil {
			fmt.Fprintln(os.Stderr, "jwtcheck:", err)
			os.Exit(2)
		}
	}
	if err := scanner.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "jwtcheck: reading stdin:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

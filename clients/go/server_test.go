package msgboard_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	msgboard "github.com/msgboard/msgboard/clients/go"
)

// A real `msgboard serve` on a free loopback port over a fresh data
// directory: the repository's .venv/bin/msgboard, or $MSGBOARD_BIN.

type server struct {
	cmd     *exec.Cmd
	address string
	dir     string
}

// repoRoot is the repository this package sits in (clients/go).
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

var servingOn = regexp.MustCompile(`serving on (\S+:\d+)`)

// startServer runs `msgboard serve` with args in a new temporary directory.
func startServer(args ...string) (*server, error) {
	dir, err := os.MkdirTemp("", "msgboard-go-")
	if err != nil {
		return nil, err
	}
	return startServerIn(dir, "127.0.0.1:0", args...)
}

// startServerIn runs `msgboard serve` over dir/data, listening on listen.
func startServerIn(dir, listen string, args ...string) (*server, error) {
	bin := os.Getenv("MSGBOARD_BIN")
	if bin == "" {
		bin = filepath.Join(repoRoot(), ".venv", "bin", "msgboard")
	}
	all := []string{"serve", "--data", filepath.Join(dir, "data"), "--listen", listen}
	standby := false
	for _, a := range args {
		standby = standby || a == "--standby-of"
	}
	if !standby { // a standby always fsyncs before it acks
		all = append(all, "--sync", "weaker-no-fsync")
	}
	all = append(all, args...)
	cmd := exec.Command(bin, all...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%s (set MSGBOARD_BIN, or run scripts/setup): %w", bin, err)
	}
	s := &server{cmd: cmd, dir: dir}
	found := make(chan string, 1)
	var log strings.Builder
	var mu sync.Mutex
	go func() {
		lines := bufio.NewScanner(stderr)
		for lines.Scan() {
			mu.Lock()
			log.WriteString(lines.Text() + "\n")
			mu.Unlock()
			if m := servingOn.FindStringSubmatch(lines.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		close(found)
	}()
	select {
	case a, ok := <-found:
		if ok {
			s.address = a
			return s, nil
		}
	case <-time.After(60 * time.Second):
	}
	s.stop()
	mu.Lock()
	defer mu.Unlock()
	return nil, fmt.Errorf("the server did not start: %s", log.String())
}

func (s *server) stop() {
	s.halt(syscall.SIGTERM)
	os.RemoveAll(s.dir)
}

// halt ends the server with sig (SIGKILL after 20 s), leaving its directory.
func (s *server) halt(sig os.Signal) {
	_ = s.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// freePort is a loopback address free now, for a board restarted on it.
func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

var (
	shared     *server
	sharedErr  error
	sharedOnce sync.Once
	queueCount atomic.Int64
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.stop()
	}
	os.Exit(code)
}

// open is a client of the shared open board (started on first use).
func open(t testing.TB) *msgboard.Client {
	t.Helper()
	sharedOnce.Do(func() { shared, sharedErr = startServer() })
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	c, err := msgboard.Dial(shared.address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// queue is a fresh queue name for one test.
func queue(t testing.TB) string {
	return fmt.Sprintf("go-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), queueCount.Add(1))
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

package ui

import (
	"fmt"
	"io"
	"os/exec"
	"runtime"
)

// browserCommand is the program that opens a URL in the user's browser on
// each system: xdg-open (freedesktop.org, Linux and the BSDs), macOS's
// open, and on Windows the URL protocol handler of url.dll, which takes
// the URL as one argument (cmd /c start would parse its & as cmd.exe's).
func browserCommand(goos, url string) (string, []string) {
	switch goos {
	case "darwin":
		return "open", []string{url}
	case "windows":
		return "rundll32", []string{"url.dll,FileProtocolHandler", url}
	default:
		return "xdg-open", []string{url}
	}
}

// openBrowser starts the browser on url. A machine without one (a server,
// a container) is common: a failure is a message on errOut, the URL
// having been printed already, and not an error. It does not wait for
// the program, which may run as long as the browser does.
func openBrowser(url string, errOut io.Writer) {
	name, args := browserCommand(runtime.GOOS, url)
	cmd := exec.Command(name, args...)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(errOut, "Could not open a browser (%s: %v): open the URL above.\n", name, err)
		return
	}
	go func() {
		if err := cmd.Wait(); err != nil {
			fmt.Fprintf(errOut, "Could not open a browser (%s: %v): open the URL above.\n", name, err)
		}
	}()
}

module github.com/softroce/softroce

go 1.25.0

require (
	github.com/google/go-cmp v0.7.0
	go.uber.org/goleak v1.3.0
	golang.org/x/net v0.58.0
	golang.org/x/sys v0.47.0
)

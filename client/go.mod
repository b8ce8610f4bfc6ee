module github.com/batonrun/baton/client

go 1.26.0

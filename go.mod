module github.com/softib/softib

go 1.26.8

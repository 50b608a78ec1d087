module kvidx.dev/kvidx

go 1.19

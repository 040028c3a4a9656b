(* dlopen_loop.ml — a C library dlopen'd, called and dlclose'd in a loop.
   Usage: dlopen_loop.exe LIB.so
   torture-libs: *)
external dl_round : string -> int -> int = "torture_dl_round"

let () =
  let lib = Sys.argv.(1) in
  let acc = ref 0 in
  for i = 1 to 300 do acc := (!acc + dl_round lib i) land 0xffffff done;
  Printf.printf "dlopen rounds: %d\n" !acc

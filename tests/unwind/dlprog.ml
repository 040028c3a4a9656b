(* tests/unwind/dlprog.ml — a plugin host: loads libdlwork.so, calls into
   it for ~30 ms and unloads it, over and over (as a program that runs
   plugins or Dynlink'ed code does). MODE "path" opens it by its full path;
   "bare" by its bare name (found through LD_LIBRARY_PATH).
   Usage: dlprog.exe [SCALE] [path|bare] *)

external round : string -> int -> int = "dlp_round"

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let mode = if Array.length Sys.argv > 2 then Sys.argv.(2) else "path"
let rounds = max 1 (int_of_float (scale *. 60.))

let lib =
  if mode = "bare" then "libdlwork.so"
  else Filename.concat (Filename.dirname Sys.executable_name) "libdlwork.so"

let[@inline never] plugin_round i = round lib (3_000_000 + i)

let () =
  let acc = ref 0 in
  for i = 1 to rounds do acc := !acc + plugin_round i done;
  Printf.printf "dlprog: %d\n" (!acc land 0xffff)

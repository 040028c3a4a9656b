(* closefds.ml — a program that owns its descriptors, as daemons do: it
   closes 3..1023, opens its own files (which take the low numbers), works
   for over a second (the agent flushes a chunk every second), dup2s one of
   its files over 960..1000 (where an agent may keep its own), works again,
   then writes to every descriptor and exits. Its files must hold exactly
   what it wrote, and the profile must still be complete.
   torture-libs: unix *)
let fd_of_int (i : int) : Unix.file_descr = Obj.magic i

let[@inline never] work n =
  let acc = ref 9 in
  for i = 1 to n do acc := (!acc * 29 + i) land 0xffffff done;
  !acc

let () =
  for i = 3 to 1023 do (try Unix.close (fd_of_int i) with Unix.Unix_error _ -> ()) done;
  let files = List.init 5 (fun i ->
    Unix.openfile (Printf.sprintf "f%d.txt" i) [Unix.O_WRONLY; Unix.O_CREAT; Unix.O_TRUNC] 0o644) in
  let say fd s = ignore (Unix.write_substring fd s 0 (String.length s)) in
  List.iteri (fun i fd -> say fd (Printf.sprintf "file %d: %d\n" i (work 40_000_000))) files;
  let extra = List.init 41 (fun k -> let n = fd_of_int (960 + k) in Unix.dup2 (List.hd files) n; n) in
  List.iteri (fun i fd -> say fd (Printf.sprintf "file %d again: %d\n" i (work 40_000_000))) files;
  List.iteri (fun k fd -> say fd (Printf.sprintf "via %d\n" (960 + k))) extra;
  print_endline "done"

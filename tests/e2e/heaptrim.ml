(* heaptrim: OCaml blocks above 128 words come and go, as arrays and
   buffers do in real programs: each is a malloc of the runtime's, and the
   major GC's sweep frees it again. glibc serves them from the main heap;
   whether it gives the heap's top back to the kernel (and takes it again
   at the next allocations) at every sweep depends on how the heap lies.
   The program prints its page faults, which count how often that happened:
   a few hundred alone, over a hundred thousand when the top is trimmed and
   grown again at every major slice.
   Usage: heaptrim.exe [ARRAYS, default 1000000] *)

let minor_faults () =
  (* /proc/self/stat: "pid (comm) state ..."; minflt is the 10th field, the
     7th after the command's closing parenthesis. *)
  let ic = open_in "/proc/self/stat" in
  let line = input_line ic in
  close_in ic;
  let i = String.rindex line ')' + 2 in
  let rest = String.sub line i (String.length line - i) in
  int_of_string (List.nth (String.split_on_char ' ' rest) 7)

let[@inline never] churn n =
  let s = ref 0 in
  for i = 1 to n do
    let a = Array.make 300 i in
    s := !s + a.(i land 255)
  done;
  !s

let () =
  let n = if Array.length Sys.argv > 1 then int_of_string Sys.argv.(1) else 1_000_000 in
  let s = churn n in
  Printf.printf "heaptrim: sum %d, page faults %d\n" s (minor_faults ())
